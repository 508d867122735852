package train

// NewCheckpoint returns a checkpoint of the files under dir, for Report.
func NewCheckpoint(dir string) *Checkpoint {
	return &Checkpoint{Dir: dir}
}
