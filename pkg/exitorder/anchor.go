package exitorder

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

var anchor struct {
	once sync.Once
	pid  int
	err  error
	live atomic.Bool // started and not ended
}

// Anchored reports whether this process's exit anchor holds its memory
// now: HoldMemory started it and it has not ended.
func Anchored() bool { return anchor.live.Load() }

// HoldMemory starts this process's exit anchor, once per process (later
// calls return the first one's answer): a child process named name (at
// most 15 bytes are kept) that shares this process's memory, holds none of
// its descriptors, and exits once every thread of this process has. When
// the process is killed, the kernel then closes its descriptors first and
// frees its memory after, in the anchor's exit, instead of the other way
// round. It returns the anchor's pid. Should the anchor end while this
// process lives, log says so at warn level.
func HoldMemory(name string, log hclog.Logger) (int, error) {
	anchor.once.Do(func() {
		anchor.pid, anchor.err = startAnchor(name)
		if anchor.err == nil {
			anchor.live.Store(true)
			go waitAnchor(anchor.pid, log)
		}
	})
	return anchor.pid, anchor.err
}

// anchorExits are the anchor's own exit statuses (anchor_linux_amd64.s).
var anchorExits = map[int]string{
	2: "it could not close the descriptors it was born with (close_range(2) needs Linux 5.9)",
	3: "it could not wait for this process (ppoll(2) on a pidfd)",
}

// waitAnchor reaps the anchor, which ends before this process only when
// something kills it or it cannot do its work.
func waitAnchor(pid int, log hclog.Logger) {
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	anchor.live.Store(false)
	why := fmt.Sprintf("exit status %d", ws.ExitStatus())
	if ws.Signaled() {
		why = fmt.Sprintf("signal %d (%s)", int(ws.Signal()), ws.Signal())
	} else if s, ok := anchorExits[ws.ExitStatus()]; ok {
		why = s
	}
	log.Warn("the exit anchor ended; a kill of this process now closes its connections only after the kernel frees its memory",
		"anchor_pid", pid, "why", why)
}
