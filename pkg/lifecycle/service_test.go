package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestState: releases run once, in reverse order, by whoever ends the
// life: Stop before Run, or Run when it returns.
func TestState(t *testing.T) {
	t.Run("stop before run", func(t *testing.T) {
		var s State
		var got []int
		s.Defer(func() { got = append(got, 1) })
		s.Defer(func() { got = append(got, 2) })
		s.Stop()
		require.Equal(t, []int{2, 1}, got, "released at Stop, last acquired first")
		s.Stop()
		require.NoError(t, s.Run(context.Background(), func(context.Context) error {
			t.Fatal("the body ran after Stop")
			return nil
		}))
		require.Equal(t, []int{2, 1}, got, "released once")
	})
	t.Run("stop during run", func(t *testing.T) {
		var s State
		released := 0
		s.Defer(func() { released++ })
		running := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- s.Run(context.Background(), func(ctx context.Context) error {
				close(running)
				<-ctx.Done()
				return errors.New("body's error")
			})
		}()
		<-running
		s.Stop()
		s.Stop()
		select {
		case err := <-errc:
			require.EqualError(t, err, "body's error")
		case <-time.After(5 * time.Second):
			t.Fatal("Stop did not end Run's context")
		}
		require.Equal(t, 1, released)
		require.ErrorIs(t, s.Run(context.Background(), func(context.Context) error { return nil }), ErrRunTwice)
		s.Stop()
		require.Equal(t, 1, released, "released once")
	})
}
