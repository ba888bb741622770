package redistest

import (
	"context"
	"fmt"
	"testing"
)

func TestSingle(t *testing.T) {
	s := New(t)
	c := s.Client(t)
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if n, err := c.Exists(context.Background(), "k").Result(); err != nil || n != 0 {
		t.Fatalf("restarted server should be empty: n=%d err=%v", n, err)
	}
}

func TestCluster(t *testing.T) {
	c := NewCluster(t)
	cc := c.Client(t)
	ctx := context.Background()
	for i := range 50 {
		if err := cc.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	used := 0
	for _, n := range c.Nodes {
		if size, _ := n.Client(t).DBSize(ctx).Result(); size > 0 {
			used++
		}
	}
	if used != 3 {
		t.Fatalf("keys landed on %d of 3 masters", used)
	}
}

// TestDurableRecovers: a durable server killed with SIGKILL comes back on
// its address with what it answered.
func TestDurableRecovers(t *testing.T) {
	s := NewDurable(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.KillAndHold(t)
	s.Recover(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("recovered server lost the key: %q %v", v, err)
	}
}
