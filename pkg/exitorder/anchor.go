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

// Anchored reports whether this process's exit anchor is in place:
// StartAnchor started it and it has not ended.
func Anchored() bool { return anchor.live.Load() }

// StartAnchor starts this process's exit anchor, once per process (later
// calls return the first one's answer). The anchor is a child process
// named name (at most 15 bytes are kept) that shares this process's
// descriptor table and keeps a few pages of memory; as the process dies,
// it shuts down the connections a Placer placed, highest first, then
// closes every descriptor, and exits. Its partner, named holder, shares
// this process's memory and no descriptor, and exits once the anchor has,
// so the kernel frees the memory after the closes; but not in a process
// that is its PID namespace's init (a container's), whose death kills the
// anchor once its last thread has exited: there, that thread's freeing of
// the memory is what gives the anchor its time. StartAnchor returns
// the anchor's pid. Should either end while this process lives, log says
// so at warn level.
func StartAnchor(name, holder string, log hclog.Logger) (int, error) {
	anchor.once.Do(func() {
		var holderPid int
		anchor.pid, holderPid, anchor.err = startAnchor(name, holder)
		if anchor.err == nil {
			anchor.live.Store(true)
			go waitChild(anchor.pid, "the exit anchor ended; a kill of this process now closes its connections only after the kernel has freed its memory and walked its descriptors", anchorExits, log, &anchor.live)
			if holderPid != 0 {
				go waitChild(holderPid, "the exit anchor's memory holder ended; a kill of this process now frees its memory while the anchor closes its connections", holderExits, log, nil)
			}
		}
	})
	return anchor.pid, anchor.err
}

// The exit statuses of the anchor and of its holder (their
// instructions are in anchor_linux_amd64.s) that say why.
var (
	anchorExits = map[int]string{3: "it could not wait for this process's death (futex(2))"}
	holderExits = map[int]string{
		2: "it could not close the descriptors it was born with (close_range(2) needs Linux 5.9)",
		3: "it could not wait for the anchor (ppoll(2) on a pidfd)",
	}
)

// waitChild reaps a child that ends before this process only when
// something kills it or it cannot do its work, and says so; live, if
// any, turns false.
func waitChild(pid int, msg string, exits map[int]string, log hclog.Logger, live *atomic.Bool) {
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	if live != nil {
		live.Store(false)
	}
	why := fmt.Sprintf("exit status %d", ws.ExitStatus())
	if ws.Signaled() {
		why = fmt.Sprintf("signal %d (%s)", int(ws.Signal()), ws.Signal())
	} else if s, ok := exits[ws.ExitStatus()]; ok {
		why = s
	}
	log.Warn(msg, "pid", pid, "why", why)
}
