//go:build !linux

package wsnode

import (
	"errors"

	"github.com/headcount/headcount/pkg/wsfront"
)

// listenLoop: the event loop is Linux's (config refuses it elsewhere).
func (a *App) listenLoop(string, wsfront.Options) (port, error) {
	return nil, errors.New("the event-loop transport needs Linux")
}
