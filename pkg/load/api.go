package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/clock"
)

// publish triggers an event on a hot channel PublishRate times a second,
// carrying its send time.
func (r *run) publish(ctx context.Context) {
	t := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.PublishRate))
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, _ := json.Marshal(map[string]string{"sent": strconv.FormatInt(time.Now().UnixNano(), 10)})
		body, _ := json.Marshal(map[string]any{"name": "load", "channel": "load-hot-" + strconv.Itoa(n%r.cfg.HotChannels), "data": string(data)})
		if r.api(ctx, http.MethodPost, "/apps/"+r.cfg.AppID+"/events", nil, body) == nil {
			r.published.Add(1)
		}
	}
}

// api sends a signed request and decodes a JSON answer into out (if any).
func (r *run) api(ctx context.Context, method, path string, query url.Values, body []byte, out ...any) error {
	q := auth.SignRequest(method, path, query, body, r.cfg.Key, r.cfg.Secret, time.Now())
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.cfg.API+path+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if len(out) > 0 {
		return json.Unmarshal(b, out[0])
	}
	return nil
}

// probeEvery is how often each probe not yet counted is looked up: the
// resolution of subscribe-to-counted.
const probeEvery = 5 * time.Millisecond

// prober measures subscribe-to-counted for probe sockets: every probeEvery
// it looks up each probe not yet counted, so a probe's time never includes
// waiting behind another's (one at a time, a storm's probes queued for
// most of the ramp). A probe not counted within 30 s is dropped.
func (r *run) prober(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	var pending []probe
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.probes:
			pending = append(pending, p)
			continue
		case <-t.C:
		}
		kept := pending[:0]
		for _, p := range pending {
			var ans struct {
				Occupied bool `json:"occupied"`
			}
			if r.api(ctx, http.MethodGet, "/apps/"+r.cfg.AppID+"/channels/"+p.channel, nil, nil, &ans) == nil && ans.Occupied {
				r.mu.Lock()
				r.counted = append(r.counted, time.Since(p.sent))
				r.mu.Unlock()
			} else if time.Since(p.sent) < 30*time.Second {
				kept = append(kept, p)
			}
		}
		pending = kept
	}
}

// waitCounted polls the leaderboard (top 1,000 channels with their counts)
// until the load channels add up to want subscriptions (probes aside), for
// at most 60 s. With more than 1,000 load channels it cannot see them all
// and reports false at once.
func (r *run) waitCounted(ctx context.Context, start time.Time, want int64) (time.Duration, bool) {
	if r.channels() > 1000 {
		return 0, false
	}
	deadline := time.Now().Add(60 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		var ans struct {
			Channels map[string]struct {
				SubscriptionCount int64 `json:"subscription_count"`
			} `json:"channels"`
		}
		q := url.Values{"order": {"subscription_count"}, "limit": {"1000"}}
		if r.api(ctx, http.MethodGet, "/apps/"+r.cfg.AppID+"/channels", q, nil, &ans) == nil {
			var sum int64
			for name, c := range ans.Channels {
				if strings.HasPrefix(name, "load-hot-") || strings.HasPrefix(name, "load-cold-") || strings.HasPrefix(name, "presence-load-") {
					sum += c.SubscriptionCount
				}
			}
			if sum >= want-r.connErr.Load()-r.subErr.Load() {
				return time.Since(start), true
			}
		}
		clock.Sleep(ctx, 20*time.Millisecond)
	}
	return 0, false
}

// channels is how many load channels the distribution uses (probes aside).
func (r *run) channels() int {
	n := r.cfg.HotChannels + r.cfg.ColdChannels
	if r.cfg.PresenceShare > 0 {
		n += r.cfg.ColdChannels
	}
	return n
}
