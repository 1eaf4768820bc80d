#!/usr/bin/env bash
# A Spark standalone cluster on loopback: one master and two workers (1 core, 2 GiB each), with
# authentication (spark.authenticate) and encrypted RPC and block transfers
# (spark.network.crypto.enabled) between master, workers, executors and drivers.
#
#   infra/spark_standalone.sh start   # starts it in the background, prints the master URL
#   infra/spark_standalone.sh stop    # stops exactly the processes that `start` recorded
#
# The cluster's shared authentication secret: the file PRIVLAKE_CLUSTER_SECRET_FILE names (kept),
# else a fresh 256-bit secret written to $PRIVLAKE_CLUSTER_STATE/auth.secret (mode 600, removed by
# stop). A driver reads it from that file: PRIVLAKE_SPARK_AUTH_SECRET_FILE=<file> privlake run ...
# The master and workers read it from an operator-only properties file in the state folder, never
# from their command line.
#
# Settings (environment):
#   SPARK_HOME                    the Spark to run (default: the folder of the installed pyspark)
#   PYSPARK_PYTHON                the workers' Python (default: the project's .venv/bin/python)
#   PRIVLAKE_CLUSTER_STATE        folder for pid files, logs, work dirs and the secret (default: infra/.cluster)
#   PRIVLAKE_CLUSTER_PORT         the master's port (default: 7077)
#   PRIVLAKE_CLUSTER_TIMEOUT      seconds to wait for both workers to register (default: 90)
#   PRIVLAKE_CLUSTER_SECRET_FILE  an operator-only file holding the shared secret (default: generated)
set -euo pipefail

infra_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
project_dir=$(dirname "$infra_dir")
python=${PYSPARK_PYTHON:-$project_dir/.venv/bin/python}
state_dir=${PRIVLAKE_CLUSTER_STATE:-$infra_dir/.cluster}
port=${PRIVLAKE_CLUSTER_PORT:-7077}
timeout=${PRIVLAKE_CLUSTER_TIMEOUT:-90}
workers=2
generated_secret=$state_dir/auth.secret
daemon_conf=$state_dir/spark-daemons.conf

fail() {
    echo "spark_standalone: $*" >&2
    exit 1
}

alive() {
    [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

any_alive() {
    local pid
    for pid in "$@"; do
        kill -0 "$pid" 2>/dev/null && return 0
    done
    return 1
}

stop_cluster() {
    local pid_file pids=() waited=0
    for pid_file in "$state_dir"/worker-*.pid "$state_dir"/master.pid; do
        [[ -f $pid_file ]] || continue
        pids+=("$(cat "$pid_file")")
    done
    if ((${#pids[@]})); then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        while any_alive "${pids[@]}" && ((waited < 150)); do
            sleep 0.1
            waited=$((waited + 1))
        done
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
        done
    fi
    rm -f "$state_dir"/worker-*.pid "$state_dir"/master.pid "$daemon_conf"
    [[ ${PRIVLAKE_CLUSTER_SECRET_FILE:-} -ef $generated_secret ]] || rm -f "$generated_secret"
}

# The shared secret's file: the operator's, or a fresh one in the state folder (mode 600).
secret_file() {
    if [[ -n ${PRIVLAKE_CLUSTER_SECRET_FILE:-} ]]; then
        [[ -s $PRIVLAKE_CLUSTER_SECRET_FILE ]] || fail "PRIVLAKE_CLUSTER_SECRET_FILE=$PRIVLAKE_CLUSTER_SECRET_FILE is missing or empty"
        if [[ $(stat -c %a "$PRIVLAKE_CLUSTER_SECRET_FILE") != [0-7]00 ]]; then
            fail "$PRIVLAKE_CLUSTER_SECRET_FILE may be read by other users: chmod 600 it"
        fi
        echo "$PRIVLAKE_CLUSTER_SECRET_FILE"
        return
    fi
    (umask 077 && "$python" -c 'import secrets; print(secrets.token_hex(32))' >"$generated_secret")
    echo "$generated_secret"
}

# The master's and workers' Spark settings: authentication with the shared secret, encrypted RPC.
write_daemon_conf() {
    local secret
    secret=$(tr -d '[:space:]' <"$1")
    (
        umask 077
        printf '%s\n' \
            "spark.authenticate true" \
            "spark.authenticate.secret $secret" \
            "spark.network.crypto.enabled true" >"$daemon_conf"
    )
}

start_cluster() {
    [[ -x $python ]] || fail "no Python at $python (run 'make install' or set PYSPARK_PYTHON)"
    export PYSPARK_PYTHON=$python
    export SPARK_HOME=${SPARK_HOME:-$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
    export SPARK_LOCAL_IP=127.0.0.1
    [[ -x $SPARK_HOME/bin/spark-class ]] || fail "no spark-class under SPARK_HOME=$SPARK_HOME"
    for pid_file in "$state_dir"/master.pid "$state_dir"/worker-*.pid; do
        alive "$pid_file" && fail "a cluster recorded in $state_dir is already running; stop it first"
    done
    mkdir -p "$state_dir/logs" "$state_dir/work"
    chmod 700 "$state_dir"
    rm -f "$state_dir"/*.pid
    local shared
    shared=$(secret_file) || exit 1
    write_daemon_conf "$shared"

    nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$port" --webui-port 0 --properties-file "$daemon_conf" \
        >"$state_dir/logs/master.log" 2>&1 </dev/null &
    echo $! >"$state_dir/master.pid"

    local deadline=$((SECONDS + timeout))
    until grep -q "I have been elected leader" "$state_dir/logs/master.log" 2>/dev/null; do
        alive "$state_dir/master.pid" || { stop_cluster; fail "the master exited; see $state_dir/logs/master.log"; }
        ((SECONDS < deadline)) || { stop_cluster; fail "the master did not start within ${timeout}s"; }
        sleep 0.5
    done

    local index
    for index in $(seq 1 "$workers"); do
        nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
            "spark://127.0.0.1:$port" --cores 1 --memory 2g --host 127.0.0.1 --webui-port 0 \
            --properties-file "$daemon_conf" \
            --work-dir "$state_dir/work/worker-$index" \
            >"$state_dir/logs/worker-$index.log" 2>&1 </dev/null &
        echo $! >"$state_dir/worker-$index.pid"
    done

    until (($(grep -c "Registering worker" "$state_dir/logs/master.log" 2>/dev/null || true) >= workers)); do
        for index in $(seq 1 "$workers"); do
            alive "$state_dir/worker-$index.pid" ||
                { stop_cluster; fail "worker $index exited; see $state_dir/logs/worker-$index.log"; }
        done
        ((SECONDS < deadline)) || { stop_cluster; fail "the workers did not register within ${timeout}s"; }
        sleep 0.5
    done
    echo "spark://127.0.0.1:$port"
}

case ${1:-} in
    start) start_cluster ;;
    stop) stop_cluster ;;
    *) fail "usage: $0 start|stop" ;;
esac
