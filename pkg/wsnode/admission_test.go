package wsnode_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/keyspace"
)

// TestAdmissionGate: on a channel of capacity 1 over two nodes, only the
// slot holder may subscribe; a connected waiter is refused with
// AdmissionRequired and its place, and when the member leaves for longer
// than the grace the waiter is told it is admitted (no polling) and then
// subscribes.
func TestAdmissionGate(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	for _, n := range nodes {
		n.run(t)
	}
	ctx := context.Background()
	gate := admission.New(nodes[0].redis.Client(t), keyspace.Space{})
	app := nodes[0].cfg.Apps.ByID(admAppID)
	const ch = "presence-room-1"
	rule := admission.RuleFor(app, ch)
	require.Equal(t, 1, rule.Capacity)

	res, err := gate.Check(ctx, admAppID, ch, "alice", rule)
	require.NoError(t, err)
	require.Equal(t, admission.Admitted, res.Status)
	alice, aliceID := nodes[0].connectKey(t, admKey)
	subscribePresenceKey(t, alice, admKey, aliceID, ch, `{"user_id":"alice"}`)

	res, err = gate.Check(ctx, admAppID, ch, "bob", rule)
	require.NoError(t, err)
	require.Equal(t, 1, res.Position)
	bob, bobID := nodes[1].connectKey(t, admKey)
	cd := `{"user_id":"bob"}`
	send(t, bob, subscribeFrame(ch, signKey(admKey, bobID+":"+ch+":"+cd), cd))
	f := read(t, bob)
	require.Equal(t, "pusher:subscription_error", f.Event, f.raw)
	require.Equal(t, "AdmissionRequired", f.data(t)["type"])
	require.EqualValues(t, 403, f.data(t)["status"])
	require.Contains(t, f.data(t)["error"], "number 1 of 1")

	// Someone not on the list is refused too, and told how to get on it.
	carol, carolID := nodes[1].connectKey(t, admKey)
	cd2 := `{"user_id":"carol"}`
	send(t, carol, subscribeFrame(ch, signKey(admKey, carolID+":"+ch+":"+cd2), cd2))
	f = read(t, carol)
	require.Equal(t, "AdmissionRequired", f.data(t)["type"])
	require.Contains(t, f.data(t)["error"], "ask the app to admit you")

	// Bob stays connected past the dropout time (3 s) without any check-in
	// of the app's: his node checks in for him, so he keeps his place.
	// Alice leaves; after her grace (1 s) the slot goes to bob, who is told
	// on the channel and then subscribes.
	// Past the dropout time, bob is still on the list: his node checks in.
	time.Sleep(rule.Dropout + time.Second) // the time passing is what is tested
	st, _, err := gate.State(ctx, admAppID, ch, rule)
	require.NoError(t, err)
	require.Equal(t, admission.State{Capacity: 1, Occupancy: 1, Waiting: 1}, st, "bob dropped out while connected")

	// Alice's membership must reach Redis first: a join and leave within
	// one flush are no membership at all, and her ticket would then last.
	deadline := time.Now().Add(wait)
	for {
		m, err := nodes[0].store.Members(ctx, admAppID, ch)
		require.NoError(t, err)
		if _, ok := m["alice"]; ok {
			break
		}
		require.True(t, time.Now().Before(deadline), "alice never became a member")
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	send(t, alice, `{"event":"pusher:unsubscribe","data":{"channel":"`+ch+`"}}`)
	f = readEvent(t, bob, "headcount:admission_admitted")
	require.Equal(t, ch, f.Channel)
	require.EqualValues(t, 30, f.data(t)["expires_in"])
	took := time.Since(start)
	require.GreaterOrEqual(t, took, rule.Grace, "alice's grace was not kept")
	t.Logf("bob admitted %v after alice left (grace %v)", took.Round(time.Millisecond), rule.Grace)
	p := subscribePresenceKey(t, bob, admKey, bobID, ch, cd)
	require.Equal(t, []string{"bob"}, p.IDs)

	// Now alice is the one refused: her slot is gone.
	send(t, alice, subscribeFrame(ch, signKey(admKey, aliceID+":"+ch+":"+`{"user_id":"alice"}`), `{"user_id":"alice"}`))
	f = readSkippingMembers(t, alice)
	require.Equal(t, "AdmissionRequired", f.data(t)["type"])
}

// TestAdmissionDeleteWhileJoining: capacity 3, three admitted users
// subscribe; right after one's subscription_succeeded, and before her node
// has recorded her as a member (its flush is slowed here to half a second,
// still within the grace of 1 s, as a node's must be), the app gives
// up her seat (DELETE .../admission) while her socket stays. Her seat stays
// taken: a newcomer waits, GET never says more than 3, and the seat goes
// to the head of the list only after she leaves.
func TestAdmissionDeleteWhileJoining(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	nodes[0].SetCoalesce(500 * time.Millisecond)
	for _, n := range nodes {
		n.run(t)
	}
	ctx := context.Background()
	gate := admission.New(nodes[0].redis.Client(t), keyspace.Space{})
	const ch = "presence-room-delete"
	rule := admission.RuleFor(nodes[0].cfg.Apps.ByID(admAppID), ch)
	_, _, err := gate.SetCapacity(ctx, admAppID, ch, 3, rule)
	require.NoError(t, err)
	state := func() admission.State {
		t.Helper()
		st, _, err := gate.State(ctx, admAppID, ch, rule)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Occupancy, st.Capacity, "GET says %+v", st)
		return st
	}
	isMember := func(user string) bool {
		m, err := nodes[0].store.Members(ctx, admAppID, ch)
		require.NoError(t, err)
		_, ok := m[user]
		return ok
	}

	for _, u := range []string{"alice", "bob", "carol"} {
		res, err := gate.Check(ctx, admAppID, ch, u, rule)
		require.NoError(t, err)
		require.Equal(t, admission.Admitted, res.Status, u)
	}
	for _, u := range []string{"bob", "carol"} {
		c, id := nodes[1].connectKey(t, admKey)
		subscribePresenceKey(t, c, admKey, id, ch, `{"user_id":"`+u+`"}`)
	}
	alice, aliceID := nodes[0].connectKey(t, admKey)
	subscribePresenceKey(t, alice, admKey, aliceID, ch, `{"user_id":"alice"}`)
	_, _, err = gate.Leave(ctx, admAppID, ch, "alice", rule)
	require.NoError(t, err)
	require.False(t, isMember("alice"), "the DELETE came after alice's node recorded her: the window was missed")

	res, err := gate.Check(ctx, admAppID, ch, "dave", rule)
	require.NoError(t, err)
	require.Equal(t, admission.Waiting, res.Status, "dave got alice's seat while she is subscribed")
	require.Equal(t, admission.State{Capacity: 3, Occupancy: 3, Waiting: 1}, state())

	require.Eventually(t, func() bool { return isMember("alice") }, wait, tick, "alice's node never recorded her")
	require.Equal(t, admission.State{Capacity: 3, Occupancy: 3, Waiting: 1}, state(), "with alice a member")

	// She leaves: having given up her slot she has no grace, and her seat
	// goes to dave once her subscribe's hold is over.
	send(t, alice, `{"event":"pusher:unsubscribe","data":{"channel":"`+ch+`"}}`)
	require.Eventually(t, func() bool { return state().Waiting == 0 }, wait, tick, "dave never got the seat alice left")
	res, err = gate.Check(ctx, admAppID, ch, "dave", rule)
	require.NoError(t, err)
	require.Equal(t, admission.Admitted, res.Status)
	require.Equal(t, admission.State{Capacity: 3, Occupancy: 3, Waiting: 0}, res.State)
}
