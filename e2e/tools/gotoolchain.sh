# Sourced by e2e/tools/build.sh and hack/compat/genmodule.sh.
# gotoolchain GO_DIRECTIVE: exports GOTOOLCHAIN when a tool module needs a
# newer Go than the machine's (Kubernetes 1.38 needs 1.27): go1.27.3, the
# one approved toolchain, which the go command takes from the module proxy
# (about 76 MB, once). Nothing else in the repo changes toolchain.
gotoolchain() {
  local need=$1 have
  have=$(go env GOVERSION | sed 's/^go//')
  if [ "$(printf '%s\n' "$need" "$have" | sort -V | tail -1)" != "$have" ]; then
    case $need in
      1.27|1.27.*) export GOTOOLCHAIN=go1.27.3 ;;
      *) echo "a tool module needs Go $need; this machine has $have and only go1.27.3 is approved" >&2; return 2 ;;
    esac
  fi
}
