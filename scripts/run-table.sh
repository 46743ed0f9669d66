# The whole training runs that prove a change kept every bit (sourced by
# scripts/gpu-device-run.sh and scripts/bits-compare.sh; one table, one place).
# Needs RECIPE_STEPS; sets run_names (in order) and run_args[NAME] (mxsim train
# arguments, eval'ed by the caller), and run_ckpt_args (the checkpoint pair's config).
# DEFAULT_STEPS, when set, shortens the default run.
steps_default=""
[ -n "${DEFAULT_STEPS:-}" ] && steps_default="--set run.max_steps=$DEFAULT_STEPS"
S="--set run.max_steps=$RECIPE_STEPS"
declare -A run_args=(
  [default]="$steps_default"
  [bf16]="$S --set recipe.fc1=bf16 --set recipe.fc2=bf16"
  [mxfp8]="$S --set recipe.fc1=mxfp8 --set recipe.fc2=mxfp8"
  [fp8_current]="$S --set recipe.fc1=fp8_current --set recipe.fc2=fp8_current"
  [fp8_delayed]="$S --set recipe.fc1=fp8_delayed --set recipe.fc2=fp8_delayed"
  [fp8_block]="$S --set recipe.fc1=fp8_block --set recipe.fc2=fp8_block"
  [nvfp4]="$S --set recipe.fc1=nvfp4 --set recipe.fc2=nvfp4"
  [mxfp4_nohad]="$S --set recipe.mxfp4_hadamard_wgrad=false"
  [mxfp4_sr]="$S --set recipe.mxfp4_sr_grad=true"
  [deosc_gelu]="$S --set model.activation=gelu --set deosc.start_step=10 --set deosc.period=10 --set 'trace.snapshot_steps=[1,50,100]' --set 'trace.snapshot_layers=[\"fc1\",\"fc2\"]'"
  [silu]="$S --set model.activation=silu"
  [per_gemm]="$S --set recipe.fc1_dgrad=mxfp8 --set recipe.fc1_wgrad=bf16 --set recipe.fc2=bf16 --set recipe.fc2_wgrad=mxfp4 --set 'trace.snapshot_steps=[1,50]' --set 'trace.snapshot_layers=[\"fc1\",\"fc2\"]'"
)
run_names=(default bf16 mxfp8 fp8_current fp8_delayed fp8_block nvfp4 mxfp4_nohad mxfp4_sr deosc_gelu silu per_gemm)
# A checkpoint pair: the first half of a run written to a checkpoint (--stop-after), the
# rest resumed from it; with a delayed-scaling layer and de-oscillation windows that cross it.
run_ckpt_args="$S --set recipe.fc2=fp8_delayed --set deosc.start_step=10 --set deosc.period=10"
