package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		p, err := Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if lo-1-20000 >= 1000 && (p < 20000 || p >= lo) {
			t.Fatalf("Pick = %d, want in [20000, %d)", p, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("Pick = %d, which cannot be bound: %v", p, err)
		}
		l.Close()
	}
}
