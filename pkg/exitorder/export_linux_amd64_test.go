package exitorder

// SetWatchers sets how many threads the next StartAnchor has wake the
// anchor: 0 leaves it to its looks at the process.
func SetWatchers(n int) { watchers = n }
