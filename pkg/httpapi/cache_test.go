package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/cache"
	"github.com/headcount/headcount/pkg/config"
)

// TestCacheChannelPublishes: a publish on a cache channel, single or batch,
// is kept as the channel's last event and shown by info=cache with its
// TTL; other channels of the same publish are not cached. On a single
// Redis and on a Cluster, where the cache write shares the publish's slot.
func TestCacheChannelPublishes(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, common config.Common) {
		s := startServer(t, common)
		c := s.pusherClient(t, appSecret)
		info := func(ch string) (body string) {
			t.Helper()
			r := s.get(t, "/apps/"+appID+"/channels/"+ch, url.Values{"info": {"cache"}})
			require.Equal(t, http.StatusOK, r.code, r.body)
			return r.body
		}
		require.Equal(t, `{"occupied":false}`+"\n", info("cache-a"))

		require.NoError(t, c.TriggerMulti([]string{"cache-a", "private-cache-b", "public-c"}, "first", map[string]int{"n": 1}))
		require.NoError(t, c.Trigger("cache-a", "second", map[string]int{"n": 2}))
		var got struct {
			Occupied bool `json:"occupied"`
			Cache    struct {
				Data string `json:"data"`
				TTL  int64  `json:"ttl"`
			} `json:"cache"`
		}
		require.NoError(t, json.Unmarshal([]byte(info("cache-a")), &got))
		require.False(t, got.Occupied)
		require.Equal(t, `{"n":2}`, got.Cache.Data)
		require.InDelta(t, cache.DefaultTTL.Seconds(), got.Cache.TTL, 5)
		require.Contains(t, info("private-cache-b"), `"data":"{\"n\":1}"`)

		_, err := c.TriggerBatch([]pusher.Event{{Channel: "presence-cache-d", Name: "b", Data: "x"}, {Channel: "private-cache-b", Name: "b", Data: "y"}})
		require.NoError(t, err)
		require.Contains(t, info("presence-cache-d"), `"data":"x"`)
		require.Contains(t, info("private-cache-b"), `"data":"y"`)

		r := s.get(t, "/apps/"+appID+"/channels/public-c", url.Values{"info": {"cache"}})
		require.Equal(t, http.StatusBadRequest, r.code, r.body)
	})
}
