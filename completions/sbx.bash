# bash completion for sbx                                   -*- shell-script -*-
# Flags follow docs/cli.md; tests/check_docs_in_step.py keeps them in step.
# Install as /usr/share/bash-completion/completions/sbx (or source it).
# shellcheck disable=SC2207  # COMPREPLY=($(compgen ...)) is the bash-completion idiom

_sbx_drivers="subprocess runsc microvm deno remote"
_sbx_networks="none jail"
_sbx_log_formats="plain json"
_sbx_global_opts="--config --state-dir -h --help"
_sbx_create_opts="--name --driver --image --memory --pids --cpus --disk --network
    --idle-timeout --idle-action --ttl --persistent -e --env -l --label -w --workdir --allow --from"

# Names of stored images, and `host`; honours --config/--state-dir already on the line.
_sbx_images()
{
    local sbx=sbx
    [[ $1 == */* && -x $1 ]] && sbx=$1
    "$sbx" image ls --json "${_sbx_ctx[@]}" 2>/dev/null |
        sed -n 's/^ *"names": \[ *"\([^"]*\)".*/\1/p'
    echo host
}

# Ids of existing sandboxes; honours --config/--state-dir already on the line.
_sbx_ids()
{
    local sbx=sbx
    [[ $1 == */* && -x $1 ]] && sbx=$1
    "$sbx" ls -q "${_sbx_ctx[@]}" 2>/dev/null
}

_sbx()
{
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion -s -n : || return
    else
        # Without bash-completion: plain words (no re-joining of ID:path).
        words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
        cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
        [[ $cur == = ]] && prev=${COMP_WORDS[COMP_CWORD-1]} cur=""
        [[ $prev == = ]] && prev=${COMP_WORDS[COMP_CWORD-2]}
    fi

    # Find the subcommand, the --config/--state-dir context, and what is
    # already on the line after the subcommand.
    local sub="" i w dashdash=0 npos=0 rm_flag=0
    local -a _sbx_ctx=() pos=()
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        case $w in
            --config | --state-dir)
                _sbx_ctx+=("$w" "${words[i + 1]}")
                ((i++))
                continue
                ;;
            --config=* | --state-dir=*)
                _sbx_ctx+=("$w")
                continue
                ;;
        esac
        if [[ -z $sub ]]; then
            [[ $w != -* ]] && sub=$w
            continue
        fi
        if ((dashdash)); then
            continue
        fi
        case $w in
            --) dashdash=1 ;;
            --rm) rm_flag=1 ;;
            --name | --driver | --image | --memory | --pids | --cpus | --disk | \
            --network | --idle-timeout | --idle-action | --ttl | -e | --env | -l | --label | \
            -w | --workdir | --timeout | --max-size | --filter | --listen | \
            --tls-cert | --tls-key | --log-format | --api-key-file | --allow | \
            --packages | --suite | --file | --ref | --tail | --signal)
                ((i++)) ;;
            -s) [[ $sub == kill ]] && ((i++)) ;;
            -f) [[ $sub == ls ]] && ((i++)) ;;
            -*) ;;
            *) pos+=("$w") && ((npos++)) ;;
        esac
    done

    # After `exec ... --` everything is the sandboxed command.
    ((dashdash)) && return

    # Values of options.
    case $prev in
        --config | --tls-cert | --tls-key | --api-key-file)
            _filedir 2>/dev/null || COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --state-dir)
            _filedir -d 2>/dev/null || COMPREPLY=($(compgen -d -- "$cur"))
            return ;;
        --image)
            COMPREPLY=($(compgen -W "$(_sbx_images "${words[0]}")" -- "$cur"))
            [[ $cur == */* || $cur == .* ]] && COMPREPLY+=($(compgen -d -- "$cur"))
            return ;;
        --file)
            _filedir 'y?(a)ml' 2>/dev/null || COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --driver)
            COMPREPLY=($(compgen -W "$_sbx_drivers" -- "$cur"))
            return ;;
        -s | --signal)
            if [[ $sub == kill ]]; then
                COMPREPLY=($(compgen -W "KILL TERM INT HUP QUIT USR1 USR2 STOP CONT" -- "$cur"))
                return
            fi
            ;;
        --network)
            COMPREPLY=($(compgen -W "$_sbx_networks" -- "$cur"))
            return ;;
        --log-format)
            COMPREPLY=($(compgen -W "$_sbx_log_formats" -- "$cur"))
            return ;;
        --remote)
            # Optional URL: offer $SANDBOX_MANAGER_URL, or fall through to flags.
            if [[ $cur != -* ]]; then
                [[ -n ${SANDBOX_MANAGER_URL-} ]] &&
                    COMPREPLY=($(compgen -W "$SANDBOX_MANAGER_URL" -- "$cur"))
                declare -F __ltrim_colon_completions >/dev/null &&
                    __ltrim_colon_completions "$cur"
                return
            fi
            ;;
        --name | --memory | --disk | --max-size | --pids | --cpus | --idle-timeout | \
        --ttl | --timeout | -e | --env | -l | --label | -w | --workdir | --listen | --allow | \
        --packages | --suite | --ref | --tail)
            return ;;
        -f | --filter)
            if [[ $sub == ls ]]; then
                case $cur in
                    driver=*)
                        COMPREPLY=($(compgen -W "$_sbx_drivers" -- "${cur#driver=}"))
                        # readline replaces only the text after `=` when it is a word break
                        [[ $COMP_WORDBREAKS == *=* ]] ||
                            COMPREPLY=("${COMPREPLY[@]/#/driver=}") ;;
                    *)
                        COMPREPLY=($(compgen -W "driver= state= label:" -- "$cur"))
                        compopt -o nospace 2>/dev/null ;;
                esac
                declare -F __ltrim_colon_completions >/dev/null &&
                    __ltrim_colon_completions "$cur"
                return
            fi
            ;;
    esac

    local opts=""
    case $sub in
        "")
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$_sbx_global_opts --version" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "create exec cp ls rm gc doctor serve pool image start pause resume snapshot fork ps logs attach kill port-forward" -- "$cur"))
            fi
            return ;;
        create) opts=$_sbx_create_opts ;;
        exec)
            opts="-i --interactive -t --tty -d --detach -e --env -w --workdir --timeout"
            # create flags only for a one-shot sandbox (no ID given yet, or --rm)
            ((rm_flag || npos == 0)) && opts="-i --interactive -t --tty -d --detach --timeout --rm $_sbx_create_opts"
            ;;
        cp) opts="--max-size" ;;
        ps) opts="--json" ;;
        logs) opts="-f --follow --tail" ;;
        attach) opts="" ;;
        kill) opts="-s --signal" ;;
        ls) opts="--json -q --quiet -f --filter" ;;
        rm) opts="-f --force --all" ;;
        start | pause | resume) opts="" ;;
        fork) opts="--memory" ;;
        snapshot) opts="--json --memory" ;;
        port-forward) opts="" ;;
        gc) opts="--dry-run --json" ;;
        doctor) opts="--json --driver --remote" ;;
        serve) opts="--listen --driver --tls-cert --tls-key --log-format --api-key-file --insecure-dev --require-kvm" ;;
        pool)
            case ${pos[0]} in
                status) opts="--json" ;;
                drain) opts="--driver" ;;
            esac
            ;;
        image)
            case ${pos[0]} in
                build) opts="--packages --suite --file" ;;
                import) opts="--name --ref" ;;
                ls) opts="--json" ;;
                gc) opts="--dry-run --json" ;;
            esac
            ;;
        *) return ;;
    esac

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts $_sbx_global_opts" -- "$cur"))
        [[ $sub == exec ]] && COMPREPLY+=($(compgen -W "--" -- "$cur"))
        return
    fi

    case $sub in
        exec)
            # One ID, then `--`; no ID with --rm.
            if ((!rm_flag && npos == 0)); then
                COMPREPLY=($(compgen -W "$(_sbx_ids "${words[0]}")" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "--" -- "$cur"))
            fi
            ;;
        pool)
            ((npos == 0)) && COMPREPLY=($(compgen -W "fill status drain" -- "$cur"))
            ;;
        image)
            if ((npos == 0)); then
                COMPREPLY=($(compgen -W "build import ls inspect rm gc" -- "$cur"))
            elif [[ ${pos[0]} == inspect || ${pos[0]} == rm ]]; then
                COMPREPLY=($(compgen -W "$(_sbx_images "${words[0]}" | grep -vx host)" -- "$cur"))
            elif [[ ${pos[0]} == import ]]; then
                _filedir 2>/dev/null || COMPREPLY=($(compgen -f -- "$cur"))
            fi
            ;;
        ps | logs | attach | kill | port-forward)
            # ID, then a pid (`sbx ps ID` lists them) or [LOCAL:]REMOTE: nothing to offer
            ((npos == 0)) && COMPREPLY=($(compgen -W "$(_sbx_ids "${words[0]}")" -- "$cur"))
            ;;
        snapshot | fork)
            ((npos == 0)) && COMPREPLY=($(compgen -W "ls rm $(_sbx_ids "${words[0]}")" -- "$cur"))
            ;;
        rm | start | pause | resume)
            local id
            for id in $(_sbx_ids "${words[0]}"); do
                [[ " ${pos[*]} " == *" $id "* ]] || COMPREPLY+=($(compgen -W "$id" -- "$cur"))
            done
            ;;
        cp)
            ((npos >= 2)) && return
            if [[ $cur == *:* ]]; then
                return # a path inside the sandbox: nothing to offer
            fi
            local id
            for id in $(_sbx_ids "${words[0]}"); do
                [[ $id == "$cur"* ]] && COMPREPLY+=("$id:")
            done
            [[ -z $cur ]] && COMPREPLY+=(-)
            local f
            while IFS= read -r f; do
                [[ -d $f ]] && f+=/
                COMPREPLY+=("$(printf '%q' "$f")")
            done < <(compgen -f -- "$cur")
            # `ID:` and `dir/` are only a start: no space after them
            if ((${#COMPREPLY[@]} == 1)) && [[ ${COMPREPLY[0]} == *[:/] ]]; then
                compopt -o nospace 2>/dev/null
            fi
            declare -F __ltrim_colon_completions >/dev/null &&
                __ltrim_colon_completions "$cur"
            ;;
    esac
} &&
    complete -F _sbx sbx

# ex: filetype=sh
