package proctest

import (
	"os"
	"strconv"
	"strings"
)

// Status is field ("PPid", "State", "VmRSS") of /proc/<pid>/status,
// trimmed; ok is false once pid is gone (or where there is no /proc).
func Status(pid int, field string) (value string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", false
	}
	for l := range strings.Lines(string(b)) {
		if v, found := strings.CutPrefix(l, field+":"); found {
			return strings.TrimSpace(v), true
		}
	}
	return "", true
}

// Children are parent's child processes, by name (/proc/<pid>/status's
// Name; the last of a name wins).
func Children(parent int) map[string]int {
	out := map[string]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := Status(pid, "PPid"); ppid != strconv.Itoa(parent) {
			continue
		}
		if name, ok := Status(pid, "Name"); ok {
			out[name] = pid
		}
	}
	return out
}
