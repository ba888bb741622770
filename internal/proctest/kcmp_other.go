//go:build !linux

package proctest

// SharesMemory: kcmp(2) is Linux's; ok is always false here.
func SharesMemory(a, b int) (same, ok bool) { return false, false }

// SharesFiles: kcmp(2) is Linux's; ok is always false here.
func SharesFiles(a, b int) (same, ok bool) { return false, false }
