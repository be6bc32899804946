# Usage: awk -f hack/e2e-failures.awk shard-*.log
#
# For each test or subtest that failed, the last lines it wrote itself
# (file.go:NN: ...), the plane's start-up lines left out, and any panic:
# printed by hack/e2e.sh before the whole logs and again last on stderr,
# so that a CI log cut to its head or its tail still says why each test
# failed. The components' log tails that follow a failure are left out
# (they are in the whole logs). go test -v announces whose lines follow (=== RUN, NAME, CONT);
# the lines are kept per test, so a failed subtest's message is not
# pushed out by its parent's later lines. A message's own further lines
# (indented deeper, such as a process's log tail after "exited before
# ready") stay with it, up to 40 of them.
FNR == 1 { delete buf; delete n; cur = ""; depth = -1 }
/^=== (RUN|NAME|CONT) / { cur = $3; depth = -1; next }
/^[ \t]+[a-z_]+\.go:[0-9]+: / {
	if (/^[ \t]+(plane|nodes|realnode|karpenter)\.go:/) { depth = -1; next }
	# The components' log tails a failed test's cleanup prints come after
	# its failure and would take the 12 lines' room.
	if (/: component logs:$/) { depth = -1; next }
	keep($0); next
}
/^panic: / { keep($0); next }
/^[ \t]*--- FAIL: Test/ {
	depth = -1
	name = $3
	print "----- " name " failed; its last lines -----"
	for (i = (n[name] > 12 ? n[name] - 12 : 0); i < n[name]; i++) print buf[name, i % 12]
	next
}
depth >= 0 && indent($0) > depth && extra < 40 {
	buf[cur, (n[cur] - 1) % 12] = buf[cur, (n[cur] - 1) % 12] "\n" $0
	extra++
	next
}
{ depth = -1 }
function keep(line) { buf[cur, n[cur] % 12] = line; n[cur]++; depth = indent(line); extra = 0 }
function indent(line) { match(line, /^[ \t]*/); return RLENGTH }
