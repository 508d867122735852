//go:build !race

package collective

func raceRelease() {}
func raceAcquire() {}
