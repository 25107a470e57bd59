#!/usr/bin/env bash
# make install / make uninstall into a DESTDIR: exactly the binary, the manual page
# seckill(8) and the systemd unit (its ExecStart naming the installed binary), under
# PREFIX (given, and the default /usr/local); uninstall removes each of them. Runs
# make in the checkout (the binary is built already: nothing to compile).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin install make

# The build the tests run (SECKILL_BUILD build/address: SANITIZER=address), so that
# make finds its binary built.
san=${SECKILL_BUILD:-build}
san=${san#build}
san=${san#/}
mk() { make --no-print-directory -s -C "$ROOT" SANITIZER="$san" "$@"; }

installed() { # DESTDIR: the files under it, relative, sorted
    (cd "$1" && find . -type f -o -type l | sed 's|^\./|/|' | sort)
}

dest=$dir/pkg
mk install DESTDIR="$dest" PREFIX=/usr >"$dir/install.out" 2>&1
expect "make install DESTDIR=... PREFIX=/usr: exit 0" "0" "$?"
expect "... installs exactly the binary, the man page and the unit" \
    "/usr/bin/seckill /usr/lib/systemd/system/seckill.service /usr/share/man/man8/seckill.8" \
    "$(installed "$dest" | xargs)"
check "... the binary runs (--version)" "$dest/usr/bin/seckill" --version
expect "... executable, the others read-only files" "755 644 644" \
    "$(stat -c %a "$dest/usr/bin/seckill" "$dest/usr/share/man/man8/seckill.8" \
        "$dest/usr/lib/systemd/system/seckill.service" | xargs)"
check "... the man page is docs/seckill.8" cmp -s "$ROOT/docs/seckill.8" "$dest/usr/share/man/man8/seckill.8"
expect "... the unit starts the installed binary" "ExecStart=/usr/bin/seckill" \
    "$(grep '^ExecStart=' "$dest/usr/lib/systemd/system/seckill.service")"
expect "... and is otherwise scripts/seckill.service" "1" \
    "$(diff "$ROOT/scripts/seckill.service" "$dest/usr/lib/systemd/system/seckill.service" | grep -c '^>')"

mk uninstall DESTDIR="$dest" PREFIX=/usr >"$dir/uninstall.out" 2>&1
expect "make uninstall: exit 0" "0" "$?"
expect "... removes every file it installed" "" "$(installed "$dest" | xargs)"

dest=$dir/default
mk install DESTDIR="$dest" >"$dir/install2.out" 2>&1
expect "PREFIX defaults to /usr/local" \
    "/usr/local/bin/seckill /usr/local/lib/systemd/system/seckill.service /usr/local/share/man/man8/seckill.8" \
    "$(installed "$dest" | xargs)"
mk uninstall DESTDIR="$dest" >/dev/null 2>&1
expect "... and uninstall finds them there" "" "$(installed "$dest" | xargs)"

checks_summary
