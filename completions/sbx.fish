# fish completion for sbx. Flags follow docs/cli.md;
# tests/check_docs_in_step.py keeps them in step.
# Install as ~/.config/fish/completions/sbx.fish or into $fish_complete_path.

set -l commands create exec cp ls rm gc doctor serve pool image start pause resume snapshot fork ps logs attach kill port-forward

function __sbx_drivers
    printf '%s\t%s\n' \
        subprocess 'namespaces, overlay, cgroups, seccomp' \
        runsc gVisor \
        microvm 'KVM micro-VM' \
        deno 'Deno sandbox' \
        remote 'remote sandbox manager'
end

# Names of stored images, and `host` (the host view).
function __sbx_images
    sbx image ls --json 2>/dev/null | string replace -rf '^ *"names": \[ *"([^"]*)".*' '$1'
    printf '%s\t%s\n' host 'The host view'
end

# Ids of existing sandboxes; honours --config/--state-dir already on the line.
function __sbx_ids
    set -l ctx
    set -l tokens (commandline -opc)
    for i in (seq 2 (count $tokens))
        switch $tokens[$i]
            case --config --state-dir
                set -q tokens[(math $i + 1)]; and set -a ctx $tokens[$i] $tokens[(math $i + 1)]
            case '--config=*' '--state-dir=*'
                set -a ctx $tokens[$i]
        end
    end
    sbx ls -q $ctx 2>/dev/null
end

# Words after the subcommand that are not options (nor option values).
function __sbx_args
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l sub ""
    set -l skip 0
    for t in $tokens
        if test $skip -eq 1
            set skip 0
            continue
        end
        switch $t
            case --config --state-dir --name --driver --image --memory --pids --cpus --disk --network \
                --idle-timeout --idle-action --ttl -e --env -l --label -w --workdir --timeout --max-size --filter \
                --listen --tls-cert --tls-key --log-format --api-key-file --allow --packages --suite \
                --file --ref
                set skip 1
            case -f
                test "$sub" = ls; and set skip 1
            case '-*'
            case '*'
                if test -z "$sub"
                    set sub $t
                else
                    echo $t
                end
        end
    end
end

# exec: an ID is due (no --rm, no ID yet, no `--`).
function __sbx_exec_wants_id
    set -l tokens (commandline -opc)
    contains -- --rm $tokens; and return 1
    contains -- -- $tokens; and return 1
    test (count (__sbx_args)) -eq 0
end

# cp: SRC or DEST is due.
function __sbx_cp_wants_arg
    test (count (__sbx_args)) -lt 2
end

function __sbx_cp_ids
    for id in (__sbx_ids)
        printf '%s:\tsandbox\n' $id
    end
end

function __sbx_filters
    set -l cur (commandline -ct)
    switch $cur
        case 'driver=*'
            for d in subprocess runsc microvm deno remote
                echo driver=$d
            end
        case '*'
            printf '%s\n' driver= state= label:
    end
end

complete -c sbx -f

# Global flags.
complete -c sbx -l config -r -F -d 'Configuration file'
complete -c sbx -l state-dir -x -a '(__fish_complete_directories)' -d 'State root'
complete -c sbx -s h -l help -d 'Print usage'
complete -c sbx -n __fish_use_subcommand -l version -d 'Print the version'

# Subcommands.
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a create -d 'Create a sandbox and print its id'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a exec -d 'Run a command in a sandbox'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a cp -d 'Copy files between the host and a sandbox'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a ls -d 'List sandboxes'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a rm -d 'Destroy sandboxes'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a start -d 'Start a stopped persistent sandbox again'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a pause -d 'Pause sandboxes: their processes stop, their memory stays'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a resume -d 'Resume paused sandboxes'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a snapshot -d 'Snapshot a sandbox\'s files, or list (ls) or remove (rm) snapshots'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a fork -d 'Start a new sandbox whose files are a copy of this one\'s'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a port-forward -d 'Forward a local port to a port inside a sandbox'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a gc -d 'Remove idle, expired, dead and orphaned sandboxes'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a doctor -d 'Check which drivers can run'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a serve -d 'Run the sandbox manager'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a pool -d 'Fill, show or drain the warm pool'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a image -d 'Build, import, list and remove images'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a ps -d "List a sandbox's background processes"
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a logs -d "Show a background process's output"
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a attach -d 'Attach to a background process again'
complete -c sbx -n "not __fish_seen_subcommand_from $commands" -a kill -d 'Signal a background process and all it started'

# create (and exec --rm).
set -l c '__fish_seen_subcommand_from create exec'
complete -c sbx -n $c -l driver -x -a '(__sbx_drivers)' -d 'Driver'
complete -c sbx -n $c -l image -x -a '(__sbx_images; __fish_complete_directories)' -d 'Read-only base: image, host or directory'
complete -c sbx -n $c -l memory -x -d 'Memory cap, e.g. 256M (default 512M)'
complete -c sbx -n $c -l name -x -d 'A name to use instead of the id (unique)'
complete -c sbx -n $c -l pids -x -d 'Maximum number of processes (default 256)'
complete -c sbx -n $c -l cpus -x -d 'CPU cap in cores (default 1)'
complete -c sbx -n $c -l disk -x -d 'Size cap of the writable layer (default 1G)'
complete -c sbx -n $c -l network -x -a 'none jail' -d 'Network mode (default none)'
complete -c sbx -n '__fish_seen_subcommand_from create' -l from -x -d 'Start with the files of this snapshot'
complete -c sbx -n $c -l allow -x -d 'With --network jail: reach only this network or domain (CIDR|DOMAIN)'
complete -c sbx -n $c -l idle-timeout -x -d 'Collect after this long idle; 0 = never (default 10m)'
complete -c sbx -n $c -l ttl -x -d 'Collect this long after creation; 0 = never (default 0)'
complete -c sbx -n $c -l idle-action -x -a 'pause remove' -d 'At the idle timeout (default remove; pause if persistent)'
complete -c sbx -n $c -l persistent -d 'Never removed by idle or TTL gc (paused when idle)'
complete -c sbx -n $c -s e -l env -x -d 'Environment variable KEY=VALUE'
complete -c sbx -n $c -s l -l label -x -d 'Label KEY=VALUE'
complete -c sbx -n $c -s w -l workdir -x -d 'Working directory (default /work)'

# exec.
set -l x '__fish_seen_subcommand_from exec'
complete -c sbx -n $x -s i -l interactive -d 'Forward stdin to the command'
complete -c sbx -n $x -s t -l tty -d 'Run the command on a terminal'
complete -c sbx -n $x -s d -l detach -d 'Start it in the background and print its pid'
complete -c sbx -n $x -l timeout -x -d 'Kill the whole process tree after this long'
complete -c sbx -n $x -l rm -d 'One-shot: create a sandbox, run, remove it'
complete -c sbx -n "$x; and __sbx_exec_wants_id" -a '(__sbx_ids)' -d 'Sandbox'

# cp.
set -l p '__fish_seen_subcommand_from cp'
complete -c sbx -n $p -l max-size -x -d 'Refuse transfers larger than this (default 1G)'
complete -c sbx -n "$p; and __sbx_cp_wants_arg" -a '(__sbx_cp_ids)'
complete -c sbx -n "$p; and __sbx_cp_wants_arg" -a - -d 'Tar stream on stdin/stdout'
complete -c sbx -n "$p; and __sbx_cp_wants_arg; and not string match -q -- '*:*' (commandline -ct)" -F

# ls.
set -l l '__fish_seen_subcommand_from ls; and not __fish_seen_subcommand_from image'
complete -c sbx -n $l -l json -d 'JSON array of records'
complete -c sbx -n $l -s q -l quiet -d 'Ids only'
complete -c sbx -n $l -s f -l filter -x -a '(__sbx_filters)' -d 'driver=NAME, state=STATE, label:KEY=VALUE'

# rm.
set -l r '__fish_seen_subcommand_from rm; and not __fish_seen_subcommand_from image'
complete -c sbx -n $r -s f -l force -d 'No error for ids that do not exist'
complete -c sbx -n $r -l all -d 'Every sandbox'
complete -c sbx -n $r -a '(__sbx_ids)' -d 'Sandbox'

# ps, logs, attach, kill: ID, then a pid (`sbx ps ID` lists them).
function __sbx_wants_id_first
    set -l tokens (commandline -opc)
    set -l n 0
    for t in $tokens[3..-1]
        string match -q -- '-*' $t; or set n (math $n + 1)
    end
    test $n -eq 0
end
complete -c sbx -n '__fish_seen_subcommand_from ps logs attach kill; and __sbx_wants_id_first' -f -a '(__sbx_ids)' -d 'Sandbox'
complete -c sbx -n '__fish_seen_subcommand_from ps' -l json -d 'JSON array of processes'
complete -c sbx -n '__fish_seen_subcommand_from logs' -s f -l follow -d 'Follow until the process exits'
complete -c sbx -n '__fish_seen_subcommand_from logs' -l tail -x -d 'Only the last N lines of each stream'
complete -c sbx -n '__fish_seen_subcommand_from kill' -s s -l signal -x -a 'KILL TERM INT HUP QUIT USR1 USR2 STOP CONT' -d 'The signal (default KILL)'

# start, pause, resume.
complete -c sbx -n '__fish_seen_subcommand_from start pause resume' -a '(__sbx_ids)' -d 'Sandbox'

# snapshot ID [NAME] | ls [--json] | rm NAME...; fork ID.
complete -c sbx -n '__fish_seen_subcommand_from snapshot fork' -f -a '(__sbx_ids)' -d 'Sandbox'
complete -c sbx -n '__fish_seen_subcommand_from snapshot' -f -a 'ls rm' -d 'Snapshots'
complete -c sbx -n '__fish_seen_subcommand_from snapshot' -l json -d 'JSON array (ls)'
complete -c sbx -n '__fish_seen_subcommand_from snapshot fork' -l memory -d 'Memory and running processes too (runsc, microvm)'

# port-forward: ID, then [LOCAL:]REMOTE.
complete -c sbx -n '__fish_seen_subcommand_from port-forward; and test (count (commandline -opc)) -le 2' -a '(__sbx_ids)' -d 'Sandbox'

# gc.
set -l g '__fish_seen_subcommand_from gc; and not __fish_seen_subcommand_from image'
complete -c sbx -n $g -l dry-run -d 'List what would be done, change nothing'
complete -c sbx -n $g -l json -d 'JSON report'

# doctor.
set -l d '__fish_seen_subcommand_from doctor'
complete -c sbx -n $d -l json -d 'JSON report'
complete -c sbx -n $d -l driver -x -a '(__sbx_drivers)' -d 'Check this driver instead of the configured chain'
# --remote takes an optional URL (default $SANDBOX_MANAGER_URL); fish offers it as --remote=URL.
complete -c sbx -n $d -l remote -d 'Check the sandbox manager at URL instead of this host'
complete -c sbx -n "$d; and string match -q -- '--remote=*' (commandline -ct); and set -q SANDBOX_MANAGER_URL" \
    -a '(printf "%s\n" --remote=$SANDBOX_MANAGER_URL)' -d 'SANDBOX_MANAGER_URL'

# serve.
set -l s '__fish_seen_subcommand_from serve'
complete -c sbx -n $s -l listen -x -d 'HOST:PORT to listen on (default 0.0.0.0:8000, 8400 for microvm)'
complete -c sbx -n $s -l driver -x -a '(__sbx_drivers)' -d 'Default driver of new sandboxes'
complete -c sbx -n $s -l tls-cert -r -F -d 'Serve HTTPS with this PEM certificate chain'
complete -c sbx -n $s -l tls-key -r -F -d 'PEM private key of --tls-cert'
complete -c sbx -n $s -l log-format -x -a 'plain json' -d 'Request log format (default plain)'
complete -c sbx -n $s -l api-key-file -r -F -d 'Read the admin API key from this file'
complete -c sbx -n $s -l insecure-dev -d 'Run without a key, on a loopback address only'
complete -c sbx -n $s -l require-kvm -d 'Refuse to start unless micro-VMs get hardware KVM (not PVM)'

# pool.
set -l p '__fish_seen_subcommand_from pool'
complete -c sbx -n "$p; and not __fish_seen_subcommand_from fill status drain" -a 'fill' -d 'Start sandboxes up to each pool size'
complete -c sbx -n "$p; and not __fish_seen_subcommand_from fill status drain" -a 'status' -d 'Show each driver\'s pool'
complete -c sbx -n "$p; and not __fish_seen_subcommand_from fill status drain" -a 'drain' -d 'Remove the unclaimed pooled sandboxes'
complete -c sbx -n "$p; and __fish_seen_subcommand_from status" -l json -d 'JSON array, one object per driver'
complete -c sbx -n "$p; and __fish_seen_subcommand_from drain" -l driver -x -a '(__sbx_drivers)' -d 'Only this driver\'s pool'

# image.
set -l im '__fish_seen_subcommand_from image'
set -l imsubs build import ls inspect rm gc
complete -c sbx -n "$im; and not __fish_seen_subcommand_from $imsubs" -a build -d 'Build a Debian image with mmdebstrap'
complete -c sbx -n "$im; and not __fish_seen_subcommand_from $imsubs" -a import -d 'Import an OCI image'
complete -c sbx -n "$im; and not __fish_seen_subcommand_from $imsubs" -a ls -d 'List images'
complete -c sbx -n "$im; and not __fish_seen_subcommand_from $imsubs" -a inspect -d 'Show an image\'s record'
complete -c sbx -n "$im; and not __fish_seen_subcommand_from $imsubs" -a rm -d 'Remove images or names'
complete -c sbx -n "$im; and not __fish_seen_subcommand_from $imsubs" -a gc -d 'Remove unused images and caches'
complete -c sbx -n "$im; and __fish_seen_subcommand_from build" -l packages -x -d 'Debian packages to install'
complete -c sbx -n "$im; and __fish_seen_subcommand_from build" -l suite -x -a 'bookworm trixie' -d 'Debian suite (default bookworm)'
complete -c sbx -n "$im; and __fish_seen_subcommand_from build" -l file -r -F -d 'Recipe file (YAML)'
complete -c sbx -n "$im; and __fish_seen_subcommand_from import" -l name -x -d 'Name the imported image'
complete -c sbx -n "$im; and __fish_seen_subcommand_from import" -l ref -x -d 'Which image of the archive'
complete -c sbx -n "$im; and __fish_seen_subcommand_from import" -F
complete -c sbx -n "$im; and __fish_seen_subcommand_from ls gc" -l json -d 'JSON output'
complete -c sbx -n "$im; and __fish_seen_subcommand_from gc" -l dry-run -d 'List what would be removed'
complete -c sbx -n "$im; and __fish_seen_subcommand_from inspect rm" -a '(__sbx_images | string match -v "host*")'
