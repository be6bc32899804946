# Usage: awk -f hack/e2e-failures.awk shard-*.log
#
# For each top-level test that failed, its last lines written by the test
# (file.go:NN: ...), the plane's start-up lines left out, and any panic:
# printed last by hack/e2e.sh, so that a CI log cut to its tail still
# says why each test failed.
FNR == 1 { n = 0 }
/^=== RUN   Test[^\/]*$/ { n = 0; test = $3 }
/^[ \t]+[a-z_]+\.go:[0-9]+: / && !/^[ \t]+(plane|nodes|realnode|karpenter)\.go:/ { buf[n++ % 12] = $0 }
/^panic: / { buf[n++ % 12] = $0 }
/^--- FAIL: Test/ {
	print "----- " $3 " failed; its last lines -----"
	for (i = (n > 12 ? n - 12 : 0); i < n; i++) print buf[i % 12]
	n = 0
}
