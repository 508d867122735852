//go:build !linux

package collective

import (
	"net"
	"syscall"
)

// setCongestion: TCP_CONGESTION is set on Linux only.
func setCongestion(syscall.RawConn, string) {}

// congestionOf: read on Linux only.
func congestionOf(net.Conn) string { return "" }
