package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// bytesAcked returns how many bytes sent on c (TCP, or TLS over TCP) its
// peer has acknowledged (TCP_INFO's tcpi_bytes_acked); false when it
// cannot tell.
func bytesAcked(c net.Conn) (uint64, bool) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return 0, false
	}
	return info.Bytes_acked, true
}
