//go:build !linux

package collective

// sendLinkStuck: TCP_INFO is read on Linux only.
func (c *Comm) sendLinkStuck() (string, bool) { return "", false }
