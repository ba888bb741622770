package redisx_test

import (
	"testing"

	"github.com/headcount/headcount/pkg/redisx/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
