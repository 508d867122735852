package computetest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/collective"
)

// ConnectTCP connects world ranks over loopback with the real collective
// (each rank's Connect in its own goroutine, as separate processes would)
// and closes them when the test ends.
func ConnectTCP(t testing.TB, world int) []*collective.Comm {
	t.Helper()
	return Connect(t, world, collective.Options{})
}

// Connect is ConnectTCP with options (Rank, Size, Token and a zero Timeout
// are filled in).
func Connect(t testing.TB, world int, o collective.Options) []*collective.Comm {
	t.Helper()
	lns := make([]net.Listener, world)
	peers := make([]string, world)
	for r := range lns {
		ln, err := collective.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[r], peers[r] = ln, ln.Addr().String()
	}
	comms := make([]*collective.Comm, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			oo := o
			oo.Rank, oo.Size, oo.Token = r, world, t.Name()
			if oo.Timeout == 0 {
				oo.Timeout = time.Minute
			}
			comms[r], errs[r] = collective.Connect(context.Background(), lns[r], peers, oo)
		}(r)
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return comms
}
