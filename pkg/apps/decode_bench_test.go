package apps

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParse10k decodes 10,000 apps, each with a webhook, as an apps
// file or a database table of that size is decoded on every change.
func BenchmarkParse10k(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[")
	for i := range 10000 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"id":"app-%d","key":"key-%d","secret":"secret-%d","max_connections":200,"enabled":true,"enable_client_messages":true,`+
			`"max_backend_events_per_sec":-1,"max_client_events_per_sec":-1,"max_read_req_per_sec":-1,`+
			`"webhooks":[{"url":"https://hooks.example.com/%d","event_types":["channel_occupied","channel_vacated"]}]}`, i, i, i, i)
	}
	sb.WriteString("]")
	in := []byte(sb.String())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(in); err != nil {
			b.Fatal(err)
		}
	}
}
