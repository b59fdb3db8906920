// The norms' and the MLP's ops with bf16 activation buffers (ActivationOut/In, runtime/backend.h:
// bf16 storage keeps those values so) as op table cases: LayerNorm's and RMSNorm's output and their
// backward's input, GeLU's (alone and after its GEMM) and SwiGLU's output and their backward's
// input. An output against the double reference within one bf16 rounding (kOneBf16Rounding); a
// bf16 input made on the host (random values, rounded), with the fp32 cases' references at exactly
// those values (kReduction).
#include <cstring>

#include "tests/runtime/backend_op_cases.h"
#include "tests/runtime/bf16_op_case_helpers.h"
#include "tests/runtime/reference_ops_llama.h"

namespace pipelane::backend_ops {

namespace {
using ref::Vec;
using namespace bf16_cases;

// The norms' forward into a bf16 buffer: the output within one bf16 rounding of the double
// reference (NMSE <= 2^-16, as the probabilities), the statistics as the fp32 op's (kReduction).
void add_norm_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 7, C = 52;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const std::vector<float> x = ref::random_floats(rng, n), w = ref::random_floats(rng, C);
  const std::vector<float> b = ref::random_floats(rng, C);
  cases.push_back({OpKind::LayerNormForward, "layernorm_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = upload_bf16(d, std::vector<std::uint16_t>(n, 0x4040));  // overwritten
                     float *mean = d.zeros(N), *rstd = d.zeros(N);
                     d.backend().layernorm_forward(ActivationOut::of_bf16(out), mean, rstd,
                                                   d.upload(poisoned_first(x, poison)), d.upload(w), d.upload(b), N, C,
                                                   d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}, {"mean", d.download(mean, N)},
                                    {"rstd", d.download(rstd, N)}};
                   },
                   [=] {
                     Vec mean, rstd;
                     Vec out =
                         ref::layernorm(ref::to_double(x), ref::to_double(w), ref::to_double(b), N, C, &mean, &rstd);
                     return Expected{{"out", out}, {"mean", mean}, {"rstd", rstd}};
                   },
                   {{"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::RmsNormForward, "rmsnorm_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = upload_bf16(d, std::vector<std::uint16_t>(n, 0x4040));  // overwritten
                     float* rstd = d.zeros(N);
                     d.backend().rmsnorm_forward(ActivationOut::of_bf16(out), rstd, d.upload(poisoned_first(x, poison)),
                                                 d.upload(w), N, C, 1e-5f, d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}, {"rstd", d.download(rstd, N)}};
                   },
                   [=] {
                     Vec rstd;
                     Vec out = ref::rmsnorm(ref::to_double(x), ref::to_double(w), N, C, 1e-5, &rstd);
                     return Expected{{"out", out}, {"rstd", rstd}};
                   },
                   {{"out", kOneBf16Rounding}}});
}

// The norms' backward on a bf16 input (whole, and the two halves): the fp32 cases' gradients at
// the bf16 values. Statistics from the backend's own forward on those values widened.
void add_norm_backward_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 6, C = 40;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const std::vector<std::uint16_t> stored = rounded_bits(ref::to_double(ref::random_floats(rng, n)));
  const Vec x = widened(stored);
  const std::vector<float> x32(x.begin(), x.end());
  const std::vector<float> w = ref::random_floats(rng, C, 0.5f), bias = ref::random_floats(rng, C, 0.5f);
  const std::vector<float> dout = ref::random_floats(rng, n), acc0 = ref::random_floats(rng, n, 0.1f);
  const auto plus = [](const std::vector<float>& a, const Vec& d) {
    Vec out(d.size());
    for (std::size_t i = 0; i < d.size(); ++i) out[i] = a[i] + d[i];
    return out;
  };
  for (const bool rms : {false, true}) {
    const auto grads = [=] {
      const Vec wd = ref::to_double(w), bd = ref::to_double(bias), R = ref::to_double(dout);
      const auto norm = [&](const Vec& in, const Vec& weight) {
        return rms ? ref::rmsnorm(in, weight, N, C, 1e-5) : ref::layernorm(in, weight, bd, N, C);
      };
      Expected e{{"dinp", plus(acc0, ref::fd_gradient([&](const Vec& p) { return norm(p, wd); }, x, R))},
                 {"dweight", plus(w, ref::fd_gradient([&](const Vec& p) { return norm(x, p); }, wd, R))}};
      const auto f_b = [&](const Vec& p) { return ref::layernorm(x, wd, p, N, C); };
      if (!rms) e["dbias"] = plus(bias, ref::fd_gradient(f_b, bd, R));
      return e;
    };
    const auto run = [=](bool halves) {
      return [=](DeviceBuffers& b, bool poison) {
        const ActivationIn inp = ActivationIn::of_bf16(upload_bf16(b, stored));
        float *weight = b.upload(w), *mean = b.zeros(N), *rstd = b.zeros(N);
        float *dinp = b.upload(acc0), *dw = b.upload(w), *db = b.upload(bias);  // all three accumulate
        float* d = b.upload(poisoned_first(dout, poison));
        Backend& be = b.backend();
        if (rms) {
          be.rmsnorm_forward(b.zeros(n), rstd, b.upload(x32), weight, N, C, 1e-5f, b.stream());
          if (!halves) be.rmsnorm_backward(dinp, dw, d, inp, weight, rstd, N, C, b.stream());
          if (halves) be.rmsnorm_backward_input(dinp, d, inp, weight, rstd, N, C, b.stream());
          if (halves) be.rmsnorm_backward_params(dw, d, inp, rstd, N, C, b.stream());
          return Outputs{{"dinp", b.download(dinp, n)}, {"dweight", b.download(dw, C)}};
        }
        be.layernorm_forward(b.zeros(n), mean, rstd, b.upload(x32), weight, b.upload(bias), N, C, b.stream());
        if (!halves) be.layernorm_backward(dinp, dw, db, d, inp, weight, mean, rstd, N, C, b.stream());
        if (halves) be.layernorm_backward_input(dinp, d, inp, weight, mean, rstd, N, C, b.stream());
        if (halves) be.layernorm_backward_params(dw, db, d, inp, mean, rstd, N, C, b.stream());
        return Outputs{{"dinp", b.download(dinp, n)}, {"dweight", b.download(dw, C)}, {"dbias", b.download(db, C)}};
      };
    };
    const std::string name = rms ? "rmsnorm_backward" : "layernorm_backward";
    const OpKind whole = rms ? OpKind::RmsNormBackward : OpKind::LayerNormBackward;
    const OpKind input = rms ? OpKind::RmsNormBackwardInput : OpKind::LayerNormBackwardInput;
    const OpKind params = rms ? OpKind::RmsNormBackwardParams : OpKind::LayerNormBackwardParams;
    cases.push_back({whole, name + " (bf16 input)", kReduction, run(false), grads});
    cases.push_back({input, name + "_input + _params (bf16 input)", kReduction, run(true), grads});
    cases.push_back({params, name + "_params (after _input, bf16 input)", kReduction, run(true), grads});
  }
}

// GeLU (alone and after its GEMM) and SwiGLU into a bf16 buffer: the output within one bf16
// rounding of the double reference (kOneBf16Rounding), the GEMM's pre-activation as the fp32
// case's (kReduction). OC a multiple of 8 takes the CUDA backend's fused GeLU epilogue.
void add_activation_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 6, C = 20, OC = 24;
  const std::size_t n = static_cast<std::size_t>(N) * OC;
  const std::vector<float> x = ref::random_floats(rng, n), up = ref::random_floats(rng, n);
  const std::vector<float> in = ref::random_floats(rng, static_cast<std::size_t>(N) * C);
  const std::vector<float> w = ref::random_floats(rng, static_cast<std::size_t>(OC) * C, 0.3f);
  const std::vector<float> bias = ref::random_floats(rng, OC, 0.3f);
  const auto bf16_out = [n](DeviceBuffers& d) { return upload_bf16(d, std::vector<std::uint16_t>(n, 0x4040)); };
  cases.push_back({OpKind::GeluForward, "gelu_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = bf16_out(d);  // overwritten
                     d.backend().gelu_forward(ActivationOut::of_bf16(out), d.upload(poisoned_first(x, poison)), n,
                                              d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}};
                   },
                   [=] { return Expected{{"out", ref::gelu(ref::to_double(x))}}; }, {{"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::SwigluForward, "swiglu_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     std::uint16_t* out = bf16_out(d);
                     d.backend().swiglu_forward(ActivationOut::of_bf16(out), d.upload(poisoned_first(x, poison)),
                                                d.upload(up), n, d.stream());
                     return Outputs{{"out", download_bf16(d, out, n)}};
                   },
                   [=] { return Expected{{"out", ref::swiglu(ref::to_double(x), ref::to_double(up))}}; },
                   {{"out", kOneBf16Rounding}}});
  cases.push_back({OpKind::MatmulGeluForward, "matmul_gelu_forward (bf16 output)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     float* pre = d.zeros(n);
                     std::uint16_t* out = bf16_out(d);
                     d.backend().matmul_gelu_forward(pre, ActivationOut::of_bf16(out),
                                                     d.upload(poisoned_first(in, poison)), d.upload(w), d.upload(bias),
                                                     N, C, OC, d.stream());
                     return Outputs{{"pre", d.download(pre, n)}, {"out", download_bf16(d, out, n)}};
                   },
                   [=] {
                     const Vec pre = ref::matmul(ref::to_double(in), ref::to_double(w), ref::to_double(bias), N, C, OC);
                     return Expected{{"pre", pre}, {"out", ref::gelu(pre)}};
                   },
                   {{"out", kOneBf16Rounding}}});
}

// GeLU's backward (alone and after its GEMM) and SwiGLU's on bf16 inputs: the fp32 cases'
// references at exactly the bf16 values.
void add_activation_input_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const int N = 6, C = 16, OC = 12;  // C a multiple of 8: the CUDA backend's DGELU epilogue
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const std::vector<std::uint16_t> bits = rounded_bits(ref::to_double(ref::random_floats(rng, 2 * n)));
  const Vec all = widened(bits);
  const Vec x(all.begin(), all.begin() + n), up(all.begin() + n, all.end());
  const std::vector<float> dy = ref::random_floats(rng, n);
  const std::vector<float> dz = ref::random_floats(rng, static_cast<std::size_t>(N) * OC);
  const std::vector<float> w = ref::random_floats(rng, static_cast<std::size_t>(OC) * C, 0.3f);
  const auto bf16_input = [bits](DeviceBuffers& d, bool poison) {
    std::vector<std::uint16_t> in = bits;
    if (poison) in[0] = 0x7fc0;  // a NaN
    return upload_bf16(d, in);
  };
  cases.push_back({OpKind::GeluBackward, "gelu_backward (bf16 input)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     float* dinp = d.upload(std::vector<float>(n, 5.f));  // overwritten
                     d.backend().gelu_backward(dinp, ActivationIn::of_bf16(bf16_input(d, poison)), d.upload(dy), n,
                                               d.stream());
                     return Outputs{{"dinp", d.download(dinp, n)}};
                   },
                   [=] { return Expected{{"dinp", ref::fd_gradient(ref::gelu, x, ref::to_double(dy))}}; }});
  cases.push_back({OpKind::SwigluBackward, "swiglu_backward (bf16 gate and up)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     const std::uint16_t* in = bf16_input(d, poison);
                     float *dgate = d.upload(std::vector<float>(n, 5.f)), *dup = d.upload(std::vector<float>(n, 5.f));
                     d.backend().swiglu_backward(dgate, dup, d.upload(dy), ActivationIn::of_bf16(in),
                                                 ActivationIn::of_bf16(in + n), n, d.stream());
                     return Outputs{{"dgate", d.download(dgate, n)}, {"dup", d.download(dup, n)}};
                   },
                   [=] {
                     const Vec R = ref::to_double(dy);
                     const auto f_g = [&](const Vec& p) { return ref::swiglu(p, up); };
                     const auto f_u = [&](const Vec& p) { return ref::swiglu(x, p); };
                     return Expected{{"dgate", ref::fd_gradient(f_g, x, R)}, {"dup", ref::fd_gradient(f_u, up, R)}};
                   }});
  cases.push_back({OpKind::MatmulBackwardInputDgelu, "matmul_backward_input_dgelu (bf16 pre)", kReduction,
                   [=](DeviceBuffers& d, bool poison) {
                     float* dpre = d.upload(std::vector<float>(n, 5.f));  // overwritten
                     d.backend().matmul_backward_input_dgelu(dpre, d.upload(dz), d.upload(w),
                                                             ActivationIn::of_bf16(bf16_input(d, poison)), N, C, OC,
                                                             d.stream());
                     return Outputs{{"dpre", d.download(dpre, n)}};
                   },
                   [=] {
                     const Vec no_bias(OC, 0.0);
                     const auto f = [&](const Vec& p) {
                       return ref::matmul(ref::gelu(p), ref::to_double(w), no_bias, N, C, OC);
                     };
                     return Expected{{"dpre", ref::fd_gradient(f, x, ref::to_double(dz))}};
                   }});
}
}  // namespace

void add_bf16_activation_cases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::size_t first = cases.size();
  add_norm_cases(cases, rng);
  add_norm_backward_cases(cases, rng);
  add_activation_cases(cases, rng);
  add_activation_input_cases(cases, rng);
  for (std::size_t i = first; i < cases.size(); ++i) cases[i].bf16_buffer = true;
}

}  // namespace pipelane::backend_ops
