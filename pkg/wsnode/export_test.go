package wsnode

import "time"

// SetIdleTimeout shortens the idle timeout and the sweep period; call it
// before Run.
func (a *App) SetIdleTimeout(idle, sweep time.Duration) {
	a.tun.idleTimeout, a.tun.sweepEvery = idle, sweep
}
