package wsnode

import (
	"errors"

	"github.com/headcount/headcount/pkg/wsfront"
)

// listenLoop: not built yet.
func (a *App) listenLoop(string, wsfront.Options) (port, error) {
	return nil, errors.New("the event-loop transport is not built yet")
}
