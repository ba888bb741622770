package redisx_test

import (
	"testing"

	"github.com/headcount/headcount/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
