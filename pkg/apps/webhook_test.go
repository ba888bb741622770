package apps

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func parseOne(t *testing.T, webhooks string) (*App, error) {
	t.Helper()
	r, err := Parse([]byte(`[{"id":"a","key":"k","secret":"s","webhooks":` + webhooks + `}]`))
	if err != nil {
		return nil, err
	}
	return r.ByID("a"), nil
}

func TestWebhookFields(t *testing.T) {
	a, err := parseOne(t, `[
	  {"url": "http://r/1", "event_types": ["client_event"], "headers": {"Authorization": "Bearer x", "X-Env": "prod"},
	   "filter": {"channel_name_starts_with": "private-", "channel_name_ends_with": "-orders"},
	   "batch": {"size": 20, "maxWaitMs": 250}},
	  {"url": "http://r/2", "eventTypes": ["channel_occupied"], "batching": {"enabled": true, "duration": 100}},
	  {"url": "http://r/3", "event_types": ["channel_occupied"], "batch": {}},
	  {"url": "http://r/4", "event_types": ["channel_occupied"], "batch": {"enabled": false, "duration": 100}}
	]`)
	require.NoError(t, err)
	w := a.Webhooks
	require.Len(t, w, 4)
	require.Equal(t, "http://r/1", w[0].URL)
	require.Equal(t, map[string]string{"Authorization": "Bearer x", "X-Env": "prod"}, w[0].Headers)
	require.Equal(t, WebhookFilter{ChannelNameStartsWith: "private-", ChannelNameEndsWith: "-orders"}, w[0].Filter)
	require.Equal(t, &WebhookBatch{Size: 20, MaxWait: 250 * time.Millisecond}, w[0].Batch)
	require.Equal(t, []string{"channel_occupied"}, w[1].EventTypes, "camelCase eventTypes")
	require.Equal(t, &WebhookBatch{Size: DefaultWebhookBatchSize, MaxWait: 100 * time.Millisecond}, w[1].Batch, "soketi's batching options")
	require.Equal(t, &WebhookBatch{Size: DefaultWebhookBatchSize, MaxWait: DefaultWebhookBatchMaxWait}, w[2].Batch)
	require.Nil(t, w[3].Batch, `"enabled": false`)
	require.Zero(t, w[3].Filter)
}

func TestWebhookFilterMatches(t *testing.T) {
	for _, tc := range []struct {
		f       WebhookFilter
		channel string
		want    bool
	}{
		{WebhookFilter{}, "anything", true},
		{WebhookFilter{}, "", true},
		{WebhookFilter{ChannelNameStartsWith: "private-"}, "private-a", true},
		{WebhookFilter{ChannelNameStartsWith: "private-"}, "presence-a", false},
		{WebhookFilter{ChannelNameEndsWith: "-x"}, "a-x", true},
		{WebhookFilter{ChannelNameEndsWith: "-x"}, "a-y", false},
		{WebhookFilter{ChannelNameStartsWith: "private-", ChannelNameEndsWith: "-x"}, "private-a-x", true},
		{WebhookFilter{ChannelNameStartsWith: "private-", ChannelNameEndsWith: "-x"}, "private-a-y", false},
		{WebhookFilter{ChannelNameStartsWith: "private-", ChannelNameEndsWith: "-x"}, "public-a-x", false},
		{WebhookFilter{ChannelNameStartsWith: "private-"}, "", false},
	} {
		require.Equal(t, tc.want, tc.f.Matches(tc.channel), "%+v %q", tc.f, tc.channel)
	}
}

func TestWebhookRejects(t *testing.T) {
	for name, tc := range map[string]struct{ webhooks, want string }{
		"signature header":    {`[{"url":"http://u","headers":{"x-pusher-signature":"forged"}}]`, `"x-pusher-signature" is set by headcount`},
		"key header":          {`[{"url":"http://u","headers":{"X-Pusher-Key":"k"}}]`, `"X-Pusher-Key" is set by headcount`},
		"content type":        {`[{"url":"http://u","headers":{"Content-Type":"text/plain"}}]`, `"Content-Type" is set by headcount`},
		"content length":      {`[{"url":"http://u","headers":{"content-length":"1"}}]`, `"content-length" is set by headcount`},
		"host":                {`[{"url":"http://u","headers":{"HOST":"evil"}}]`, `"HOST" is set by headcount`},
		"bad header name":     {`[{"url":"http://u","headers":{"X Bad":"v"}}]`, `"X Bad" is not a valid HTTP header name`},
		"header injection":    {`[{"url":"http://u","headers":{"X-A":"v\r\nX-Pusher-Signature: f"}}]`, `value of "X-A" holds a control character`},
		"header not a string": {`[{"url":"http://u","headers":{"X-A":1}}]`, `field webhooks: headers`},
		"filter typo":         {`[{"url":"http://u","filter":{"channel_starts_with":"a"}}]`, `filter: unknown field "channel_starts_with"`},
		"filter not a string": {`[{"url":"http://u","filter":{"channel_name_starts_with":1}}]`, `filter.channel_name_starts_with`},
		"batch size 0":        {`[{"url":"http://u","batch":{"size":0}}]`, `batch.size must be 1..1000, not 0`},
		"batch size too big":  {`[{"url":"http://u","batch":{"size":1001}}]`, `batch.size must be 1..1000, not 1001`},
		"batch wait negative": {`[{"url":"http://u","batch":{"maxWaitMs":-1}}]`, `batch.maxWaitMs must be 0..60000, not -1`},
		"batch wait too long": {`[{"url":"http://u","batch":{"maxWaitMs":60001}}]`, `batch.maxWaitMs must be 0..60000, not 60001`},
		"batch typo":          {`[{"url":"http://u","batch":{"maxWait":10}}]`, `batch.maxWait: unknown field`},
		"batch two waits":     {`[{"url":"http://u","batch":{"maxWaitMs":10,"duration":20}}]`, `not both`},
		"batch and batching":  {`[{"url":"http://u","batch":{},"batching":{}}]`, `give "batch" or "batching", not both`},
		"batch not an object": {`[{"url":"http://u","batch":50}]`, `batch:`},
		"same url differs":    {`[{"url":"http://u","event_types":["channel_occupied"]},{"url":"http://u","event_types":["member_added"],"batch":{}}]`, `webhooks[1]: same url as webhooks[0]`},
		"no url":              {`[{"event_types":["channel_occupied"]}]`, `url "" must be an absolute http:// or https:// URL`},
		"relative url":        {`[{"url":"/hooks"}]`, `url "/hooks" must be an absolute`},
		"other scheme":        {`[{"url":"ftp://h/x"}]`, `url "ftp://h/x" must be an absolute`},
		"lambda":              {`[{"lambda_function":"f","lambda":{"region":"eu-west-1"}}]`, `lambda_function: AWS Lambda webhooks are not supported`},
		"unknown field":       {`[{"url":"http://u","event_type":["a"]}]`, `unknown field "event_type"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseOne(t, tc.webhooks)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "app ")
		})
	}
	// Entries sharing a URL with the same headers and batch are fine.
	_, err := parseOne(t, `[{"url":"https://u/h","event_types":["channel_occupied"],"headers":{"X":"1"},"filter":{"channel_name_starts_with":"p"}},{"url":"https://u/h","event_types":["member_added"],"headers":{"X":"1"}}]`)
	require.NoError(t, err)
}

// FuzzWebhook: decoding a webhook object never panics, and whatever an
// apps file with it accepts keeps the signature's headers to headcount
// and the batch within its bounds.
func FuzzWebhook(f *testing.F) {
	for _, s := range []string{
		`{"url":"http://r","event_types":["client_event"],"headers":{"Authorization":"Bearer x"},"filter":{"channel_name_starts_with":"private-"},"batch":{"size":20,"maxWaitMs":250}}`,
		`{"url":"u","batching":{"enabled":true,"duration":50}}`,
		`{"url":"u","headers":{"content-type":"x"}}`,
		`{"url":"u","batch":{"size":1e9,"maxWaitMs":1e300}}`,
		`{"URL":"u","Event_Types":null,"filter":null,"batch":null}`,
		`[]`, `null`, `{"batch":{"enabled":"yes"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var w Webhook
		if json.Unmarshal([]byte(in), &w) != nil {
			return
		}
		a := &App{ID: "a", Key: "k", Secret: "s", Webhooks: []Webhook{w}}
		if a.validate() != nil {
			return
		}
		for name, v := range w.Headers {
			require.True(t, validHeaderName(name) && validHeaderValue(v), "%q: %q", name, v)
			require.False(t, slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, name) }), name)
		}
		if b := w.Batch; b != nil {
			require.True(t, b.Size >= 1 && b.Size <= MaxWebhookBatchSize && b.MaxWait >= 0 && b.MaxWait <= MaxWebhookBatchMaxWait, "%+v", *b)
		}
	})
}
