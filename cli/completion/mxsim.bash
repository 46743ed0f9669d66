# bash completion for mxsim. Commands and options are read from the binary's
# own --help output, so they never go stale.
_mxsim() {
  local cur prev cmd
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  cmd="${COMP_WORDS[1]}"
  if [[ ${COMP_CWORD} -eq 1 ]]; then
    local cmds
    cmds=$("${COMP_WORDS[0]}" --help 2>/dev/null | awk '/^commands:/{f=1;next} /^$/{f=0} f{print $1}')
    COMPREPLY=($(compgen -W "${cmds} --help --version" -- "${cur}"))
    return
  fi
  case "${prev}" in
    --recipe|-r|--recipe-a|--recipe-b)
      # the spec names: the "recipes" array of info --json (not its training_recipes)
      COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" info --json 2>/dev/null | sed -n '/"recipes": \[/,/"training_recipes"/ s/^ *"name": "\([a-z0-9_]*\)".*/\1/p')" -- "${cur}"))
      return ;;
    --to|--from|--elem-dtype|--a-elem-dtype|--b-elem-dtype)
      COMPREPLY=($(compgen -W "fp32 bf16 fp16 e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 e8m0" -- "${cur}"))
      return ;;
    --scale-rule) COMPREPLY=($(compgen -W "floor rceil even ceil" -- "${cur}")); return ;;
    --round) COMPREPLY=($(compgen -W "rne rz sr" -- "${cur}")); return ;;
    --axis) COMPREPLY=($(compgen -W "cols rows" -- "${cur}")); return ;;
    --overflow) COMPREPLY=($(compgen -W "saturate ieee" -- "${cur}")); return ;;
    --layout) COMPREPLY=($(compgen -W "auto mxsim torchao te" -- "${cur}")); return ;;
    --model) COMPREPLY=($(compgen -W "contract hopper blackwell" -- "${cur}")); return ;;
    --dtype|--out-dtype) COMPREPLY=($(compgen -W "fp32 bf16" -- "${cur}")); return ;;
    --impl) COMPREPLY=($(compgen -W "fast reference" -- "${cur}")); return ;;
    --backend) COMPREPLY=($(compgen -W "auto emu hip" -- "${cur}")); return ;;
    --layer) COMPREPLY=($(compgen -W "embed router fc1 fc2 head" -- "${cur}")); return ;;
    --tensor) [[ "${cmd}" == report ]] && { COMPREPLY=($(compgen -W "w x dy x_wgrad dy_wgrad" -- "${cur}")); return; } ;;
    --op) COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" verify --help 2>/dev/null | sed -n 's/^ops: //p' | tr -d ',')" -- "${cur}")); return ;;
  esac
  if [[ "${cur}" == -* ]]; then
    local opts
    opts=$("${COMP_WORDS[0]}" "${cmd}" --help 2>/dev/null | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
    COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
    return
  fi
  COMPREPLY=($(compgen -f -- "${cur}"))
}
complete -o filenames -F _mxsim mxsim
