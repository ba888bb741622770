package webhook

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
)

// TestDelivererFollowsReloads: a running deliverer starts delivering to a
// webhook URL an app reload adds (from what the log still holds: here the
// event before it, not trimmed yet), and stops delivering to one it
// removes, without a restart.
func TestDelivererFollowsReloads(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	f := newFixture(t, rdb)
	f.start(t, "r1", Options{})
	f.append(t, Event{Name: ChannelOccupied, Channel: "a"})
	f.rcv.waitFor(t, 1)

	second := newReceiver(t, f.app)
	withSecond := *f.app
	withSecond.Webhooks = append([]apps.Webhook{{URL: second.URL + "/hook", EventTypes: allTypes}}, f.app.Webhooks...)
	next, err := apps.New([]*apps.App{&withSecond})
	require.NoError(t, err)
	f.reg.Replace(next)
	f.app = &withSecond
	f.append(t, Event{Name: ChannelOccupied, Channel: "b"})
	require.ElementsMatch(t, []string{"channel_occupied a", "channel_occupied b"}, second.waitFor(t, 2), "the URL added gets the log")
	require.ElementsMatch(t, []string{"channel_occupied a", "channel_occupied b"}, f.rcv.waitFor(t, 2))

	onlySecond := withSecond
	onlySecond.Webhooks = withSecond.Webhooks[:1]
	next, err = apps.New([]*apps.App{&onlySecond})
	require.NoError(t, err)
	f.reg.Replace(next)
	f.app = &onlySecond
	f.append(t, Event{Name: ChannelOccupied, Channel: "c"})
	require.Contains(t, second.waitFor(t, 3), "channel_occupied c")
	// The removed URL's delivery stopped: nothing more reaches it.
	require.Never(t, func() bool {
		f.rcv.mu.Lock()
		defer f.rcv.mu.Unlock()
		return len(f.rcv.got) > 2
	}, 500*time.Millisecond, 50*time.Millisecond, "the URL removed got an event after its removal")
}
