// Package readerr keeps the error of a reader that a consumer does not
// report (a scanner that stops at a failed read and says only "not
// found"), so that a failed read is not taken for the end of the data.
//
// Allowed imports: the standard library.
package readerr

import "io"

// Reader reads from R and keeps in Err the first error other than io.EOF.
type Reader struct {
	R   io.Reader
	Err error
}

func (e *Reader) Read(b []byte) (int, error) {
	n, err := e.R.Read(b)
	if err != nil && err != io.EOF && e.Err == nil {
		e.Err = err
	}
	return n, err
}
