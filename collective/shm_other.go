//go:build !linux

package collective

// Shared memory links are implemented for Linux only; elsewhere every link
// is TCP.
const shmSupported = false

func shmDirs() []string                          { return nil }
func hostID() string                             { return "" }
func createShm(int) (*shmLink, *shmOffer, error) { return nil, nil, errNoShmHere }
func openShm(*shmOffer, int) (*shmLink, error)   { return nil, errNoShmHere }
func unlinkShm(string)                           {}
func shmUnmap([]byte)                            {}

func regionName(string) string                 { return "" }
func createRegion(string, int) ([]byte, error) { return nil, errNoShmHere }
func openRegion(string, int) ([]byte, error)   { return nil, errNoShmHere }

func sweepDeadRegions([]string) []string { return nil }
func sweepDead()                         {}
