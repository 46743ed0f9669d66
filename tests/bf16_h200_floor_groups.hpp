// BF16 k16 groups measured on an NVIDIA H200 (wgmma, CUDA 13.0, driver
// 580.159.04, 2026-12-02) where the window floor of the bf16-f25 group
// decides the result (numerics.md §5.3, hd::hopper_bf16_edges().e_floor).
// Shared by test_gemm_bf16_h200 (the emulator) and test_gpu_gemm (every GPU
// kernel).
#pragma once
#include <cstdint>

namespace mxsim::testdata {

// clang-format off
// Groups of subnormal elements (a) times small normal ones (b), C = +0, whose
// exact sum lies just below a multiple of 2^-149 (by 0.0005 to 0.002 of it):
// the H200 gives the multiple: its window stops above the exact precision,
// and truncating the negative products there lifts the sum onto it. Floors
// at 2^-157, 2^-158 and 2^-159 all fit these three; the contract takes
// 2^-158 (E at least -133, BF16's smallest subnormal exponent). Measured on 2026-12-02 as groups of
// GpuGemm.WgmmaBf16SubnormalAndTinyValuesMatchEmulator's fprop chains (run
// one group per wgmma launch with the chain's C); without_floor is the
// group with the other four edges alone (the window at E - 25 = 2^-170 ...).
struct FloorGroup {
  uint16_t a[16], b[16];
  uint32_t h200, without_floor;
};
inline constexpr FloorGroup kFloorGroups[] = {
    {{0x0001,0x8026,0x8032,0x000c,0x8029,0x0022,0x8006,0x003d,0x000e,0x0033,0x000d,0x001d,0x802e,0x001f,0x8038,0x802c},
     {0xb57d,0x3521,0x35e9,0x35b5,0xb65c,0xb620,0x338a,0xb60a,0x34bf,0x34d6,0x351c,0xb5d9,0xb58c,0x359d,0xb673,0xb53e},
     0x00000009u, 0x00000008u},
    {{0x8001,0x0001,0x8000,0x8001,0x8002,0x0001,0x8004,0x0002,0x0002,0x8001,0x8001,0x8002,0x8002,0x0002,0x0003,0x0003},
     {0xb6d8,0xb5c4,0x3585,0x3620,0x34ff,0xb682,0xb6bd,0x36b7,0x36e3,0xb5d5,0x3515,0x3701,0x35ab,0xb6ca,0xb3c2,0xb3d9},
     0x00000001u, 0x00000000u},
    {{0x0070,0x8168,0x8184,0x0013,0x8097,0x0008,0x812f,0x0076,0x0029,0x0090,0x80b0,0x00ba,0x00db,0x009d,0x8115,0x0096},
     {0xb57f,0x3521,0xb78e,0xb7f8,0x35d7,0xb74f,0xb6f6,0xb6bb,0xb706,0xb7ff,0x37d8,0xb6d7,0x370b,0x3792,0x3588,0xb6d1},
     0x000000a0u, 0x0000009fu},
};
// clang-format on

}  // namespace mxsim::testdata
