#!/usr/bin/env bash
# One scheduled privlake release, for cron (examples/cron/privlake.cron) or a systemd timer
# (examples/systemd/). Usage:
#
#   privlake-release.sh CONFIG.yaml [privlake run options, e.g. --engine spark --master URL]
#
# - The release id is PREFIX-YYYYMMDD, from the day the run starts (UTC), so a second run on the
#   same day, a retry or a manual re-run asks for the same id; once that id is published,
#   `privlake run` does nothing and exits 0. To (re-)run a past day: PRIVLAKE_RELEASE_DATE=20260301.
# - A lock (flock) keeps two runs of the same config from overlapping; a run that cannot get it
#   within PRIVLAKE_LOCK_WAIT seconds exits 75 and runs nothing.
# - Exit 75 (transient: unreachable master or catalog, lost storage, full disk) and a kill by a
#   signal are retried with exponential backoff; every other code is final, logged with its
#   meaning, and is this script's exit code: 0 published or already published, 2 bad input or
#   config, 3 quarantined, 4 refused by budget or policy, 5 nothing to release, 1 a bug.
#
# Settings (environment):
#   PRIVLAKE_BIN             the privlake executable (default: privlake on the PATH)
#   PRIVLAKE_RELEASE_PREFIX  the release id's prefix (default: the config's file name without .yaml)
#   PRIVLAKE_RELEASE_DATE    the day released, YYYYMMDD (default: today, UTC)
#   PRIVLAKE_LOCK_FILE       the lock (default: ${XDG_RUNTIME_DIR:-/tmp}/privlake-PREFIX.lock)
#   PRIVLAKE_LOCK_WAIT       seconds to wait for a running release to finish (default 3600)
#   PRIVLAKE_MAX_ATTEMPTS    attempts in all, transient failures included (default 4)
#   PRIVLAKE_RETRY_DELAY     seconds before the first retry, doubled each time (default 300)
#   PRIVLAKE_MAX_RETRY_DELAY the longest wait between attempts (default 3600)
#
# Standard output: privlake's JSON line per attempt (`run --json`: id, table, status, (ε, δ),
# rows). Standard error: this script's timestamped lines and privlake's own log lines.
set -uo pipefail

log() { printf '%s privlake-release[%d]: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" "$*" >&2; }

meaning() {
    case "$1" in
        0) echo "published (or already published)" ;;
        1) echo "a bug in privlake (PRIVLAKE_DEBUG=1 shows the traceback)" ;;
        2) echo "bad input, config or arguments" ;;
        3) echo "the output failed validation and went to quarantine" ;;
        4) echo "refused by budget or policy" ;;
        5) echo "nothing to release" ;;
        75) echo "transient infrastructure failure" ;;
        *) if [ "$1" -ge 128 ]; then echo "killed by signal $(($1 - 128))"; else echo "unknown exit code"; fi ;;
    esac
}

whole_number() { [[ "$2" =~ ^[0-9]+$ ]] || { log "$1 must be a whole number of seconds or attempts (got '$2')"; exit 2; }; }

if [ $# -lt 1 ]; then
    echo "usage: $0 CONFIG.yaml [privlake run options]" >&2
    exit 2
fi
config=$1
shift
privlake=${PRIVLAKE_BIN:-privlake}
prefix=${PRIVLAKE_RELEASE_PREFIX:-$(basename "$config" .yaml)}
day=${PRIVLAKE_RELEASE_DATE:-$(date -u +%Y%m%d)}
lock=${PRIVLAKE_LOCK_FILE:-${XDG_RUNTIME_DIR:-/tmp}/privlake-$prefix.lock}
lock_wait=${PRIVLAKE_LOCK_WAIT:-3600}
attempts=${PRIVLAKE_MAX_ATTEMPTS:-4}
delay=${PRIVLAKE_RETRY_DELAY:-300}
max_delay=${PRIVLAKE_MAX_RETRY_DELAY:-3600}
whole_number PRIVLAKE_LOCK_WAIT "$lock_wait"
whole_number PRIVLAKE_MAX_ATTEMPTS "$attempts"
whole_number PRIVLAKE_RETRY_DELAY "$delay"
whole_number PRIVLAKE_MAX_RETRY_DELAY "$max_delay"
if ! [[ "$day" =~ ^[0-9]{8}$ ]]; then
    log "PRIVLAKE_RELEASE_DATE must be YYYYMMDD (got '$day')"
    exit 2
fi
if ! [[ "$prefix" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
    log "the release id prefix '$prefix' may hold only letters, digits, '.', '_' and '-' (set PRIVLAKE_RELEASE_PREFIX)"
    exit 2
fi
release_id="$prefix-$day"

# The lock is held on file descriptor 9 for this script's life, and by privlake, which inherits
# it: a release still running after this script was killed keeps the next run out.
if ! exec 9>>"$lock"; then
    log "cannot open the lock file $lock"
    exit 2
fi
if ! flock -w "$lock_wait" 9; then
    log "release $release_id: another run of $prefix still holds $lock after ${lock_wait}s; not started (transient)"
    exit 75
fi

attempt=1
while :; do
    log "release $release_id: attempt $attempt of $attempts: $privlake run $config --release-id $release_id --json $*"
    "$privlake" run "$config" --release-id "$release_id" --json "$@"
    code=$?
    if [ "$code" -eq 0 ]; then
        log "release $release_id: $(meaning 0)"
        exit 0
    fi
    if [ "$code" -ne 75 ] && [ "$code" -lt 128 ]; then
        log "release $release_id: exit $code, $(meaning "$code"): not retried"
        exit "$code"
    fi
    if [ "$attempt" -ge "$attempts" ]; then
        log "release $release_id: exit $code, $(meaning "$code"): giving up after $attempt attempts"
        exit "$code"
    fi
    log "release $release_id: exit $code, $(meaning "$code"): retrying in ${delay}s"
    sleep "$delay"
    attempt=$((attempt + 1))
    delay=$((delay * 2 > max_delay ? max_delay : delay * 2))
done
