# Sourced by tests/tests/team_setup.rs into the bash that runs docs/team-setup.md:
# the commands this machine cannot run as they are, stood in for, and only those.
#
#   psbx keys ...          the operator's psbx, on the test server's configuration
#                          and database (psbx's machine finds them where it runs)
#   ssh office-gw CMD      CMD on "the office machine": a bash whose `docker` starts
#                          processes in the office's network namespace; CMD `sh`
#                          runs the script on standard input, as sh would
#   docker run|logs        (on office-gw only) the connector binary with the `-e`
#                          variables of a `docker run -d --name N ... IMAGE` line,
#                          IMAGE being psbx's connector image; `docker logs N`
#   ecs_runs_services      what ECS would do once the stack is up: for every service
#                          of every cluster in moto, its task definition's container
#                          (the connector image only) with its environment and its
#                          secrets read from Secrets Manager or SSM, in the VPC's
#                          namespace, desiredCount copies (moto runs no task)
#
# From the test: TS_PSBX, TS_PSBX_CONFIG, TS_PSBX_DATA, TS_DATABASE_URL, TS_CONNECTOR,
# TS_CONNECTOR_IMAGE, TS_VPC_NS, TS_OFFICE_NS, TS_LOGS, TS_STANDINS (this file).
# The test's psbx is plain http on a namespace's link: every connector gets
# PSBX_ALLOW_INSECURE=1 (a real psbx is https).

psbx() {
    case ${1-} in
    keys) DATABASE_URL=$TS_DATABASE_URL "$TS_PSBX" --config "$TS_PSBX_CONFIG" --data-dir "$TS_PSBX_DATA" "$@" ;;
    *)
        echo "psbx stand-in: only 'psbx keys ...' runs here" >&2
        return 2
        ;;
    esac
}

# Starts the connector in namespace $1, logging to $2, with the KEY=VALUE words after.
ts_connector() {
    local ns=$1 log=$2
    shift 2
    ip netns exec "$ns" env -i PATH=/usr/bin:/bin RUST_LOG=info PSBX_ALLOW_INSECURE=1 "$@" \
        "$TS_CONNECTOR" >>"$log" 2>&1 </dev/null &
}

ssh() {
    if [[ $# -lt 2 || $1 != office-gw ]]; then
        echo "ssh stand-in: only 'ssh office-gw COMMAND' (got: ssh $*)" >&2
        return 2
    fi
    shift
    local remote="$*"
    [[ $remote == sh ]] && remote='source /dev/stdin'
    TS_HOST=office-gw TS_NS=$TS_OFFICE_NS bash -c "source '$TS_STANDINS'; set -euo pipefail; $remote"
}

docker() {
    if [[ -z ${TS_NS-} ]]; then
        echo "docker stand-in: docker runs on office-gw only (ssh office-gw ...)" >&2
        return 2
    fi
    case ${1-} in
    run)
        shift
        local detach='' name='' image='' envs=()
        while (($#)); do
            case $1 in
            -d) detach=1 ;;
            --name) name=$2; shift ;;
            --name=*) name=${1#--name=} ;;
            --restart=*) ;;
            -e)
                [[ $2 == *=* ]] || { echo "docker stand-in: -e $2 has no value" >&2; return 2; }
                envs+=("$2"); shift ;;
            -*) echo "docker stand-in: option $1 is not one psbx's runCommand uses" >&2; return 2 ;;
            *) image=$1; shift; break ;;
            esac
            shift
        done
        if (($#)); then echo "docker stand-in: arguments after the image: $*" >&2; return 2; fi
        if [[ $image != "$TS_CONNECTOR_IMAGE" ]]; then
            echo "docker stand-in: $image is not psbx's connector image $TS_CONNECTOR_IMAGE" >&2
            return 2
        fi
        if [[ -z $detach || -z $name ]]; then
            echo "docker stand-in: expected -d and --name" >&2
            return 2
        fi
        ts_connector "$TS_NS" "$TS_LOGS/$TS_HOST-$name.log" "${envs[@]}"
        echo "$name started in $TS_NS (stand-in for a container)"
        ;;
    logs)
        cat "$TS_LOGS/$TS_HOST-$2.log"
        ;;
    *)
        echo "docker stand-in: only 'docker run' and 'docker logs'" >&2
        return 2
        ;;
    esac
}

ecs_runs_services() {
    local cluster service def task copies image envs name value from i
    for cluster in $(aws ecs list-clusters --query 'clusterArns[]' --output text); do
        for service in $(aws ecs list-services --cluster "$cluster" --query 'serviceArns[]' --output text); do
            def=$(aws ecs describe-services --cluster "$cluster" --services "$service" \
                --query 'services[0].taskDefinition' --output text)
            copies=$(aws ecs describe-services --cluster "$cluster" --services "$service" \
                --query 'services[0].desiredCount' --output text)
            task=$(aws ecs describe-task-definition --task-definition "$def" --query 'taskDefinition' --output json)
            [[ $(jq '.containerDefinitions | length' <<<"$task") == 1 ]] || {
                echo "ECS stand-in: $def has more than one container" >&2
                return 2
            }
            image=$(jq -r '.containerDefinitions[0].image' <<<"$task")
            [[ $image == "$TS_CONNECTOR_IMAGE" ]] || {
                echo "ECS stand-in: $def runs $image, not psbx's connector image $TS_CONNECTOR_IMAGE" >&2
                return 2
            }
            envs=()
            while IFS=$'\t' read -r name value; do
                envs+=("$name=$value")
            done < <(jq -r '.containerDefinitions[0].environment // [] | .[] | [.name, .value] | @tsv' <<<"$task")
            while IFS=$'\t' read -r name from; do
                case $from in
                arn:*:secretsmanager:*)
                    value=$(aws secretsmanager get-secret-value --secret-id "$from" --query SecretString --output text) ;;
                arn:*:ssm:*)
                    value=$(aws ssm get-parameter --name "${from#*:parameter}" --with-decryption \
                        --query Parameter.Value --output text) ;;
                *) echo "ECS stand-in: secret $name from $from" >&2; return 2 ;;
                esac
                envs+=("$name=$value")
            done < <(jq -r '.containerDefinitions[0].secrets // [] | .[] | [.name, .valueFrom] | @tsv' <<<"$task")
            for ((i = 1; i <= copies; i++)); do
                ts_connector "$TS_VPC_NS" "$TS_LOGS/ecs-${service##*/}-$i.log" "${envs[@]}"
            done
            echo "ECS stand-in: $copies task(s) of ${service##*/} ($def) started in $TS_VPC_NS"
        done
    done
}
