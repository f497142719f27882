#!/usr/bin/env bash
# sanitize.sh: build slidewin with AddressSanitizer and
# UndefinedBehaviorSanitizer (gcc) into a private copy of the PostgreSQL
# installation, then run test/run_all.sh (regression, isolation, TAP and the
# log scan; not the benchmark) against servers that preload the ASan
# runtime.  `make sanitize` runs this alone; run_all.sh runs it as its last
# step.  The last line is `N passed, M failed`; a build or setup that fails
# is a failure, never a skip.
#
# The sanitized library never reaches the normal installation: it is built
# in a copy of the source tree and installed into its own root
# (test/private_build.sh):
#   SLIDEWIN_SANITIZE_ROOT   that root, kept between runs (default:
#                            $SLIDEWIN_PRIVATE_ROOT/sanitize when that is set,
#                            else a temporary directory removed afterwards)
#
# How the servers run (each choice is needed; see the comments below):
#   SLIDEWIN_SERVER_WRAPPER="env LD_PRELOAD=<libasan>:<sanitizer_preload.so>"
#   ASAN_OPTIONS, UBSAN_OPTIONS  exported: the caller's, then ours (which win
#                                where the two name the same option)
#   SLIDEWIN_SERVER_MUST_MAP=<libasan file name>: run_all.sh and
#   SlidewinTest check that every server maps the runtime, so that a server
#   the wrapper did not reach fails instead of passing unchecked.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)

failed_setup() {
	echo "sanitize: $*" >&2
	echo
	echo "failed:"
	echo "  sanitize setup: $*"
	echo "0 passed, 1 failed"
	[[ -z ${tmp_root:-} ]] || rm -rf "$tmp_root"
	exit 1
}

cc=${CC:-gcc}
libasan=$("$cc" -print-file-name=libasan.so 2>/dev/null)
[[ $libasan == /* && -e $libasan ]] || failed_setup "$cc has no libasan.so (gcc's libasan package)"
libasan=$(readlink -f "$libasan")
[[ -e $($cc -print-file-name=libubsan.so) ]] || failed_setup "$cc has no libubsan.so"

root=${SLIDEWIN_SANITIZE_ROOT:-}
tmp_root=
if [[ -z $root && -n ${SLIDEWIN_PRIVATE_ROOT:-} ]]; then
	root=$SLIDEWIN_PRIVATE_ROOT/sanitize
fi
if [[ -z $root ]]; then
	tmp_root=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-sanitize.XXXXXX") || failed_setup "mktemp"
	root=$tmp_root
fi
if ! mkdir -p "$root" || ! root=$(cd "$root" && pwd); then
	failed_setup "cannot create $root"
fi
if [[ -n ${SLIDEWIN_PRIVATE_ROOT:-} && $root == "$(cd "$SLIDEWIN_PRIVATE_ROOT" 2>/dev/null && pwd)" ]]; then
	failed_setup "SLIDEWIN_SANITIZE_ROOT must not be SLIDEWIN_PRIVATE_ROOT (the sanitized library would replace the normal one)"
fi

# -fno-sanitize-recover: the first UB report ends the backend, as ASan's do.
flags='-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g'
echo "sanitize: building with $flags into $root"
pg_config=$(bash "$here/private_build.sh" "$root" COPT="$flags" | tail -n 1) ||
	failed_setup "the sanitized build failed"
pkglibdir=$("$pg_config" --pkglibdir)
if ! grep -q __asan_init "$pkglibdir/slidewin.so" 2>/dev/null; then
	failed_setup "$pkglibdir/slidewin.so is not instrumented"
fi

shim=$root/sanitizer_preload.so
"$cc" -shared -fPIC -O2 -Wl,-z,initfirst -o "$shim" "$here/sanitizer_preload.c" ||
	failed_setup "cannot build $shim"
chmod 755 "$shim"

export PG_CONFIG=$pg_config
# LD_PRELOAD: PostgreSQL is not instrumented, so the ASan runtime must come
# first in the library list; sanitizer_preload.so makes it initialise before
# any other library's constructor (see that file).  Colons, not spaces: the
# wrapper is split on white space.
export SLIDEWIN_SERVER_WRAPPER="env LD_PRELOAD=$libasan:$shim"
export SLIDEWIN_SERVER_MUST_MAP=${libasan##*/}
# detect_leaks=0: memory contexts are freed wholesale, by resetting them, and
#   the postmaster's children exit without freeing: every backend would report.
# abort_on_error=1: a report ends in SIGABRT, so the postmaster logs the crash
#   and restarts (or, in a TAP node, stops), and no test can pass over it.
# detect_stack_use_after_return=0: PostgreSQL leaves frames with siglongjmp
#   (elog's PG_TRY/PG_CATCH); ASan's fake stacks cannot follow that.  0 is the
#   default for gcc 12; it is spelled out so that a caller's option cannot
#   turn it on.
asan_opts=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}$asan_opts
# print_stacktrace=1: UBSan prints no stack by default.  halt_on_error and
# abort_on_error: end the backend with SIGABRT, like ASan.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1:abort_on_error=1

# The runtime must start under the wrapper: a hang here would otherwise only
# show as servers that never come up.
# shellcheck disable=SC2086
if ! out=$(timeout 30 $SLIDEWIN_SERVER_WRAPPER "$("$pg_config" --bindir)/postgres.real" -V 2>&1); then
	echo "$out"
	failed_setup "postgres -V does not run under: $SLIDEWIN_SERVER_WRAPPER"
fi

SLIDEWIN_PASS=sanitize bash "$here/run_all.sh"
rc=$?
if [[ -n $tmp_root ]]; then
	if [[ ${SLIDEWIN_KEEP:-} == 1 ]]; then
		echo "sanitized installation kept: $tmp_root"
	else
		rm -rf "$tmp_root"
	fi
fi
exit "$rc"
