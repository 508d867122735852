package activities

import (
	"reflect"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

func TestTopology(t *testing.T) {
	t.Parallel()
	peers := []api.Peer{{Node: "b"}, {Node: "a"}, {Node: "b"}, {Node: "a"}, {Node: "c"}}
	lr, ls, nr := topology(peers)
	if want := []int{0, 0, 1, 1, 0}; !reflect.DeepEqual(lr, want) {
		t.Errorf("local ranks = %v, want %v", lr, want)
	}
	if want := []int{2, 2, 2, 2, 1}; !reflect.DeepEqual(ls, want) {
		t.Errorf("local sizes = %v, want %v", ls, want)
	}
	if want := []int{0, 1, 0, 1, 2}; !reflect.DeepEqual(nr, want) {
		t.Errorf("node ranks = %v, want %v", nr, want)
	}
}
