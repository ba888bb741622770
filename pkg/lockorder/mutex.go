//go:build !lockorder

package lockorder

import "sync"

// Mutex is a sync.Mutex ranked R; without the lockorder tag it is only
// that.
type Mutex[R Ranked] struct{ sync.Mutex }

// RWMutex is a sync.RWMutex ranked R; without the lockorder tag it is only
// that.
type RWMutex[R Ranked] struct{ sync.RWMutex }

// Enabled reports whether the checks are built in (the lockorder tag).
const Enabled = false
