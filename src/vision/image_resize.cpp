// Pillow's bicubic resize, written from the algorithm of its Resample.c: for each output
// position, the input window around its centre (the kernel's support of 2 scaled by
// in/out when shrinking), the weights normalised to sum 1, then turned into integers with
// 22 fractional bits (rounded away from zero); a pass sums weight * sample with a half
// added and keeps bits 22..29, clamped to 0..255.
#include "vision/image_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hearth::vision {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// The window (first input index, count) and fixed-point weights of every output position.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;  // out_size * ksize
};

Coeffs coefficients(int in_size, int out_size) {
  constexpr double kSupport = 2.0;
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = kSupport * filterscale;
  Coeffs c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(size_t(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);  // truncation toward zero, as the C cast
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = bicubic((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[size_t(xx) * c.ksize + x] =
          int32_t(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

uint8_t clip8(int64_t v) {
  v >>= kPrecisionBits;  // arithmetic shift: floor, as Pillow's int shift
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

Image horizontal(const Image& in, int out_w) {
  const Coeffs c = coefficients(in.width, out_w);
  Image out;
  out.width = out_w;
  out.height = in.height;
  out.rgb.resize(size_t(out_w) * in.height * 3);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* row = &in.rgb[size_t(y) * in.width * 3];
    uint8_t* dst = &out.rgb[size_t(y) * out_w * 3];
    for (int xx = 0; xx < out_w; ++xx) {
      const int32_t* k = &c.k[size_t(xx) * c.ksize];
      const uint8_t* src = row + size_t(c.first[xx]) * 3;
      int64_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[xx]; ++x) {
        s0 += int64_t{src[3 * x]} * k[x];
        s1 += int64_t{src[3 * x + 1]} * k[x];
        s2 += int64_t{src[3 * x + 2]} * k[x];
      }
      dst[3 * xx] = clip8(s0);
      dst[3 * xx + 1] = clip8(s1);
      dst[3 * xx + 2] = clip8(s2);
    }
  }
  return out;
}

Image vertical(const Image& in, int out_h) {
  const Coeffs c = coefficients(in.height, out_h);
  Image out;
  out.width = in.width;
  out.height = out_h;
  const size_t stride = size_t(in.width) * 3;
  out.rgb.resize(stride * out_h);
  std::vector<int64_t> acc(stride);
  for (int yy = 0; yy < out_h; ++yy) {
    std::fill(acc.begin(), acc.end(), int64_t{1} << (kPrecisionBits - 1));
    const int32_t* k = &c.k[size_t(yy) * c.ksize];
    for (int y = 0; y < c.count[yy]; ++y) {
      const uint8_t* src = &in.rgb[size_t(c.first[yy] + y) * stride];
      for (size_t i = 0; i < stride; ++i) acc[i] += int64_t{src[i]} * k[y];
    }
    uint8_t* dst = &out.rgb[size_t(yy) * stride];
    for (size_t i = 0; i < stride; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

}  // namespace

Image resize_bicubic(const Image& image, int32_t width, int32_t height) {
  // Pillow skips a pass whose size does not change (and copies when neither does). Since
  // Pillow 13 the vertical pass goes first when the height shrinks by more than twice as
  // many pixels as the width does; the order changes the 8-bit rounding in between.
  const int64_t dh = int64_t{image.height} - height, dw = int64_t{image.width} - width;
  const bool horizontal_first = !(dh > 0 && dh > dw * 2);
  if (horizontal_first) {
    Image out = width != image.width ? horizontal(image, width) : image;
    if (height != out.height) out = vertical(out, height);
    return out;
  }
  Image out = vertical(image, height);
  if (width != out.width) out = horizontal(out, width);
  return out;
}

}  // namespace hearth::vision
