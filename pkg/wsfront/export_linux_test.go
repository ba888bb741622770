package wsfront

// LoopState is what a LoopFront holds beside Open: every connection on
// its loops (refused ones included), the refusals at the cap still open,
// and those of them lingering.
func (f *LoopFront) LoopState() (conns, lingering int) {
	return int(f.srv.Stats().Conns), int(f.lingering.Load())
}
