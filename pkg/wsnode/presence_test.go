package wsnode_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestMemberAddedNeverRepeatsTheList: user A joins a presence channel and
// user B joins right after A's subscription_succeeded, before A's node
// has flushed A or announced A's member_added. B's member list may hold A
// or not; if it does, B must not then get member_added for A (Laravel
// Echo's joining would fire for someone its here() listed). Nor does B
// get a member_removed for anyone. A third user C joins after A is in
// Redis, on A's node: its member_added follows any of A's at B, so it
// ends each trial. 30 trials on one node and 30 across two.
func TestMemberAddedNeverRepeatsTheList(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
	}{{"one node", 1}, {"two nodes", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := startNodes(t, tc.nodes)
			for _, n := range nodes {
				n.run(t)
			}
			aNode, bNode := nodes[0], nodes[len(nodes)-1]
			listed, repeated := 0, 0
			for i := range 30 {
				ch := fmt.Sprintf("presence-dup-%d", i)
				a, aID := aNode.connect(t)
				b, bID := bNode.connect(t)
				c, cID := aNode.connect(t)
				subscribePresence(t, a, aID, ch, "a", `{}`)
				cd := `{"user_id":"b","user_info":{}}`
				send(t, b, subscribeFrame(ch, sign(bID+":"+ch+":"+cd), cd))
				var got []string // member events at B, in order
				var ids []string
				for ids == nil {
					f := read(t, b)
					switch f.Event {
					case "pusher_internal:subscription_succeeded":
						ids = f.presence(t).IDs
					case "pusher_internal:member_added", "pusher_internal:member_removed":
						got = append(got, f.Event+" "+f.data(t)["user_id"].(string))
					default:
						t.Fatalf("unexpected frame %s", f.raw)
					}
				}
				aNode.requireUsers(t, appID, ch, 2)
				subscribePresence(t, c, cID, ch, "c", `{}`)
				for {
					f := read(t, b)
					require.Contains(t, []string{"pusher_internal:member_added", "pusher_internal:member_removed"}, f.Event, f.raw)
					e := f.Event + " " + f.data(t)["user_id"].(string)
					if e == "pusher_internal:member_added c" {
						break
					}
					got = append(got, e)
				}
				if slices.Contains(ids, "a") {
					listed++
					if slices.Contains(got, "pusher_internal:member_added a") {
						repeated++
						t.Logf("trial %d: B listed %v and then got %v", i, ids, got)
					}
				}
				for _, e := range got {
					require.NotContains(t, e, "member_removed", "trial %d: B got %v", i, got)
				}
				for _, conn := range []*websocket.Conn{a, b, c} {
					require.NoError(t, conn.Close(websocket.StatusNormalClosure, ""))
				}
			}
			t.Logf("B's list held A in %d of 30 trials", listed)
			require.Zero(t, repeated, "member_added for a member B's subscription_succeeded listed")
		})
	}
}
