package e2e

// benchtable_test.go: what scripts/bench.sh writes into BENCHMARKS.md.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchTable runs scripts/bench-table.awk in mode on input.
func benchTable(t *testing.T, mode, input string) string {
	t.Helper()
	cmd := exec.Command("awk", "-v", "mode="+mode, "-f", filepath.Join(repoRoot(t), "scripts", "bench-table.awk"))
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.Output()
	require.NoError(t, err)
	return string(out)
}

// TestBenchTable: a table leaves out ns/op where it means nothing (rows run
// once, median rows) and the columns left empty; the result block keeps
// go test's header and result lines, and no log line.
func TestBenchTable(t *testing.T) {
	raw := strings.Join([]string{
		"goos: linux",
		"pkg: github.com/headcount/headcount/test/e2e",
		"BenchmarkLoad/storm/round=1-2 \t       1\t1756238005 ns/op\t     10638 accepted/s",
		"--- BENCH: BenchmarkLoad/storm/round=1-2",
		"    bench_load_test.go:36: {Sockets:15000}",
		"BenchmarkLoad/storm/median-2  \t       1\t     10125 ns/op\t     10638 accepted/s",
		"\t... [output truncated]",
		"PASS",
		"ok  \tgithub.com/headcount/headcount/test/e2e\t12.3s",
	}, "\n") + "\n"
	require.Equal(t, strings.Join([]string{
		"| benchmark | accepted/s |",
		"|---|---:|",
		"| BenchmarkLoad/storm/round=1-2 | 10638 |",
		"| BenchmarkLoad/storm/median-2 | 10638 |",
		"",
		"```",
		"goos: linux",
		"pkg: github.com/headcount/headcount/test/e2e",
		"BenchmarkLoad/storm/round=1-2 \t       1\t1756238005 ns/op\t     10638 accepted/s",
		"BenchmarkLoad/storm/median-2  \t       1\t     10125 ns/op\t     10638 accepted/s",
		"```",
	}, "\n")+"\n", benchTable(t, "run", raw))

	// Timed benchmarks keep iterations and ns/op; their median row does not.
	raw = "BenchmarkApply-2 \t 13940460\t 172.4 ns/op\t 5800194 changes/s\n" +
		"BenchmarkApply/median-2 \t 1\t 3.0 ns/op\t 5800194 changes/s\n"
	require.Equal(t, strings.Join([]string{
		"| benchmark | iterations | ns/op | changes/s |",
		"|---|---:|---:|---:|",
		"| BenchmarkApply-2 | 13940460 | 172.4 | 5800194 |",
		"| BenchmarkApply/median-2 | 1 |  | 5800194 |",
	}, "\n")+"\n", strings.SplitN(benchTable(t, "run", raw), "\n\n", 2)[0]+"\n")
}

// TestBenchmarksFileClean: the committed BENCHMARKS.md is what bench.sh
// would write from its own result lines (BENCH_REGEN=1 changes nothing),
// and its result blocks hold no log lines.
func TestBenchmarksFileClean(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "BENCHMARKS.md"))
	require.NoError(t, err)
	require.Equal(t, string(b), benchTable(t, "regen", string(b)), "BENCHMARKS.md differs from BENCH_REGEN=1 bash scripts/bench.sh")
	logLine := regexp.MustCompile(`^(--- (BENCH|FAIL|SKIP)|\s+\S+\.go:\d+: |\s*\.\.\. \[output truncated\])`)
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		require.False(t, logLine.MatchString(sc.Text()), "BENCHMARKS.md:%d is a log line: %s", n, sc.Text())
	}
}
