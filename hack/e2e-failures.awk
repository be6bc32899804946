# Usage: awk -f hack/e2e-failures.awk shard-*.log
#
# For each test or subtest that failed, the last lines it wrote itself
# (file.go:NN: ...), the plane's start-up lines left out, and any panic:
# printed by hack/e2e.sh before the whole logs and again last on stderr,
# so that a CI log cut to its head or its tail still says why each test
# failed. go test -v announces whose lines follow (=== RUN, NAME, CONT);
# the lines are kept per test, so a failed subtest's message is not
# pushed out by its parent's later lines.
FNR == 1 { delete buf; delete n; cur = "" }
/^=== (RUN|NAME|CONT) / { cur = $3; next }
/^[ \t]+[a-z_]+\.go:[0-9]+: / && !/^[ \t]+(plane|nodes|realnode|karpenter)\.go:/ { keep($0) }
/^panic: / { keep($0) }
/^[ \t]*--- FAIL: Test/ {
	name = $3
	print "----- " name " failed; its last lines -----"
	for (i = (n[name] > 12 ? n[name] - 12 : 0); i < n[name]; i++) print buf[name, i % 12]
}
function keep(line) { buf[cur, n[cur] % 12] = line; n[cur]++ }
