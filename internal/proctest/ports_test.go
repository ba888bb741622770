package proctest

import "testing"

// TestFreePortNeverRepeats: thousands of picks in one process, as an e2e
// run makes, must not hand the same port out twice. Random picks alone
// repeat with near certainty at this count.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 3000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
