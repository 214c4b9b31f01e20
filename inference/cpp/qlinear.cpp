// Int8 linear layers through libtorch's quantized operators (fbgemm on x86), which tch's
// generated API does not reach: `quantized::linear_prepack` and `quantized::linear_dynamic`
// are dispatcher operators outside ATen's native functions. Called through the boxed
// dispatcher so that no quantized header's types cross this file.
//
// Tensors cross as torch-sys's handles (`at::Tensor*`); a packed weight crosses as an opaque
// heap-allocated `c10::IValue`. No C++ exception crosses: a failure returns null and leaves its
// message for `engram_qlinear_last_error`.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace {

thread_local std::string last_error;

// Swallows libtorch's warnings while packing: creating quantised tensors warns that the API
// is deprecated in later releases (this build pins torch 2.13.0), once a process, on stderr.
struct Silent : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

}  // namespace

extern "C" {

// Packs `weight` `[out, in]` (float32) and `bias` `[out]` (float32, or null): with `fp16`,
// as half-precision floats (fbgemm's fp16 GEMM, float32 activations); otherwise as symmetric
// int8 codes with one scale per output row. Returns the packed weight, or null on failure.
void* engram_qlinear_pack(const at::Tensor* weight, const at::Tensor* bias, bool fp16) {
  try {
    std::optional<at::Tensor> b;
    if (bias != nullptr) {
      b = bias->contiguous();
    }
    if (fp16) {
      std::vector<c10::IValue> stack{weight->contiguous(), b};
      static const c10::OperatorHandle prepack_fp16 = op("quantized::linear_prepack_fp16");
      prepack_fp16.callBoxed(&stack);
      return new c10::IValue(std::move(stack.at(0)));
    }
    static Silent silent;
    c10::WarningUtils::WarningHandlerGuard quiet(&silent);
    at::Tensor w = weight->contiguous();
    at::Tensor scales =
        std::get<0>(w.abs().max(1)).clamp_min(1e-12).div(127.0).to(at::kDouble);
    at::Tensor zeros = at::zeros({w.size(0)}, at::kLong);
    at::Tensor codes = at::quantize_per_channel(w, scales, zeros, 0, at::kQInt8);
    std::vector<c10::IValue> stack{codes, b};
    static const c10::OperatorHandle prepack = op("quantized::linear_prepack");
    prepack.callBoxed(&stack);
    return new c10::IValue(std::move(stack.at(0)));
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

// `input` `[..., in]` (float32) through the packed layer: `[..., out]` float32. An int8
// layer quantises its activations dynamically (per tensor, per call); an fp16 one keeps them
// float32. Returns a new tensor handle, or null on failure.
at::Tensor* engram_qlinear_forward(const void* packed, const at::Tensor* input, bool fp16) {
  try {
    std::vector<c10::IValue> stack;
    stack.emplace_back(input->contiguous());
    stack.emplace_back(*static_cast<const c10::IValue*>(packed));
    if (fp16) {
      static const c10::OperatorHandle forward_fp16 = op("quantized::linear_dynamic_fp16");
      forward_fp16.callBoxed(&stack);
      return new at::Tensor(stack.at(0).toTensor());
    }
    // reduce_range false: full 8-bit activations. torch's own dynamic Linear passes true
    // (7 bits): on CPUs without VNNI fbgemm's AVX2 kernel sums pairs of u8 x s8 products in
    // int16, which saturates where both activations and weights of a pair sit at their
    // extremes. With 7 bits multilingual-e5-small's golden cosine is 0.9927, below the bound of
    // 0.995; with 8 bits 0.9960 (measured; docs/benchmarks.md).
    stack.emplace_back(false);
    static const c10::OperatorHandle forward = op("quantized::linear_dynamic");
    forward.callBoxed(&stack);
    return new at::Tensor(stack.at(0).toTensor());
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

void engram_qlinear_free(void* packed) { delete static_cast<c10::IValue*>(packed); }

// The message of this thread's last failure (valid until its next call here).
const char* engram_qlinear_last_error() { return last_error.c_str(); }

}  // extern "C"
