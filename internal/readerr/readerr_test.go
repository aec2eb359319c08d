package readerr_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/opledger/opledger/internal/readerr"
)

func TestReaderKeepsTheFirstFailure(t *testing.T) {
	whole := &readerr.Reader{R: strings.NewReader("all of it")}
	if _, err := io.ReadAll(whole); err != nil || whole.Err != nil {
		t.Fatalf("a whole read: %v, kept %v", err, whole.Err)
	}
	cut := errors.New("connection reset")
	broken := &readerr.Reader{R: io.MultiReader(strings.NewReader("part"), iotest.ErrReader(cut))}
	_, _ = io.ReadAll(broken)
	_, _ = broken.Read(make([]byte, 1))
	if !errors.Is(broken.Err, cut) {
		t.Fatalf("kept %v, want %v", broken.Err, cut)
	}
}
