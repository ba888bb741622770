package wsnode_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
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
	t.Parallel()
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

// TestMemberLimitHoldsAfterRedisLostItsData: five users fill a presence
// channel of member limit 5 over two nodes; Redis is killed and restarted
// empty, and at once eight newcomers subscribe, four on each node. Until
// both nodes have republished their members Redis shows an empty
// channel, yet nobody new is seated: each newcomer is refused for the
// limit, and the channel ends with the five it had.
func TestMemberLimitHoldsAfterRedisLostItsData(t *testing.T) {
	t.Parallel()
	const app, key, ch = "app-five", "key-five", "presence-five"
	reg, err := apps.New([]*apps.App{{ID: app, Key: key, Secret: secret, Enabled: true, MaxPresenceMembersPerChannel: 5}})
	require.NoError(t, err)
	nodes := startNodes(t, 2, func(c *config.WSNode) {
		c.Apps = reg
		// Slow enough that the newcomers reach Redis before either node's
		// heartbeat finds its contribution gone.
		c.Heartbeat = 500 * time.Millisecond
	})
	for _, n := range nodes {
		n.run(t)
	}
	var members []string
	for i := range 5 {
		c, id := nodes[i%2].connectKey(t, key)
		user := fmt.Sprintf("member-%d", i)
		subscribePresenceKey(t, c, key, id, ch, `{"user_id":"`+user+`"}`)
		members = append(members, user)
	}
	nodes[0].requireUsers(t, app, ch, 5)
	newcomers := make([]*websocket.Conn, 8)
	frames := make([]string, len(newcomers))
	for i := range newcomers {
		var id string
		newcomers[i], id = nodes[i%2].connectKey(t, key)
		cd := fmt.Sprintf(`{"user_id":"new-%d"}`, i)
		frames[i] = subscribeFrame(ch, signKey(key, id+":"+ch+":"+cd), cd)
	}

	nodes[0].redis.Kill()
	nodes[0].redis.Restart(t) // empty
	for i, c := range newcomers {
		send(t, c, frames[i])
	}
	for i, c := range newcomers {
		f := readSkippingMembers(t, c)
		require.Equal(t, "pusher:subscription_error", f.Event, "newcomer %d was seated: %s", i, f.raw)
		require.Equal(t, "LimitReached", f.data(t)["type"], f.raw)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := nodes[0].store.Members(context.Background(), app, ch)
		require.NoError(c, err)
		assert.ElementsMatch(c, members, slices.Collect(maps.Keys(got)))
	}, wait, tick, "the members republished")
	// Stop now: the restarted server is stopped before the nodes' cleanup.
	for _, n := range nodes {
		n.cancel()
		n.waitRun(t)
	}
}
