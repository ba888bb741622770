# bench-table.awk: how scripts/bench.sh turns `go test -bench` output into
# BENCHMARKS.md. POSIX awk (mawk, gawk, busybox).
#
#   awk -v mode=run -f scripts/bench-table.awk RAW      one run's table, then its
#                                                       result lines in a code block
#   awk -v mode=regen -f scripts/bench-table.awk MD     MD with every run's table and
#                                                       block redone from the block
#
# The table has a column per unit, in order of first appearance. It leaves
# out what means nothing:
#   - ns/op of a row run once (the process benchmarks run 1x: their ns/op is
#     whatever the timer caught around their own measurement) and of a
#     median row (it reports other rows' figures: its ns/op is its own few
#     microseconds);
#   - a column left with no value, and the iterations column when every row
#     ran once.
# The code block keeps go test's header (goos, goarch, pkg, cpu) and the
# result lines; log lines (--- BENCH: and the indented lines under it,
# output truncation marks, PASS, ok) are dropped.

# keep: whether a line of go test's output belongs in the code block.
function keep(line) {
	return line ~ /^(goos|goarch|pkg|cpu):/ || line ~ /^Benchmark[^ \t]*[ \t]+[0-9]+[ \t]/
}

# render: the table and the code block of the n lines in buf.
function render(n,    i, j, f, nf, row, nu, unit, units, seen, name, iters, val, k, once, shown, u) {
	row = 0
	nu = 0
	once = 1
	for (i = 1; i <= n; i++) {
		if (buf[i] !~ /^Benchmark[^ \t]*[ \t]+[0-9]+[ \t]/) continue
		nf = split(buf[i], f, /[ \t]+/)
		row++
		name[row] = f[1]
		iters[row] = f[2]
		if (f[2] != 1) once = 0
		for (j = 3; j + 1 <= nf; j += 2) {
			unit = f[j + 1]
			if (unit == "ns/op" && (f[2] == 1 || f[1] ~ /\/median(-[0-9]+)?$/)) continue
			if (!(unit in seen)) { seen[unit] = 1; units[++nu] = unit }
			val[row, unit] = f[j]
		}
	}
	printf "| benchmark |"
	if (!once) printf " iterations |"
	for (u = 1; u <= nu; u++) printf " %s |", units[u]
	printf "\n|---|"
	if (!once) printf "---:|"
	for (u = 1; u <= nu; u++) printf "---:|"
	printf "\n"
	for (i = 1; i <= row; i++) {
		printf "| %s |", name[i]
		if (!once) printf " %s |", iters[i]
		for (u = 1; u <= nu; u++) {
			k = i SUBSEP units[u]
			printf " %s |", ((k in val) ? val[k] : "")
		}
		printf "\n"
	}
	print ""
	print "```"
	for (i = 1; i <= n; i++) if (keep(buf[i])) print buf[i]
	print "```"
}

mode == "run" { buf[++n] = $0; next }

# regen: a run's section is its heading, its table and its code block.
mode == "regen" && /^## `go test / { print; inrun = 1; inblock = 0; n = 0; next }
mode == "regen" && inrun && !inblock && /^```$/ { inblock = 1; next }
mode == "regen" && inrun && inblock && /^```$/ { print ""; render(n); inrun = 0; next }
mode == "regen" && inrun && inblock { buf[++n] = $0; next }
mode == "regen" && inrun { next }
mode == "regen" { print }

END {
	if (mode == "run") render(n)
	else if (mode != "regen") { print "bench-table.awk: set mode to run or regen" > "/dev/stderr"; exit 2 }
}
