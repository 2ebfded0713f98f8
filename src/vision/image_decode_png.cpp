// PNG through libpng. libpng reports errors by longjmp to the setjmp in read_png, a
// function that holds no C++ objects of its own; everything it fills lives in Ctx, so
// nothing is skipped by the jump and the caller frees libpng's structures either way.
// Pixels as PIL gives them: 16-bit samples keep their high byte, palette and grey are
// expanded, 1/2/4-bit grey scaled to 0..255; no gamma. Alpha (including tRNS) goes over
// white; the orientation of an eXIf chunk is applied.
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "vision/image_decode_detail.h"

namespace hearth::vision::detail {
namespace {

struct Ctx {
  std::string_view bytes;
  size_t pos = 0;
  const std::string* what = nullptr;
  const DecodeLimits* limits = nullptr;
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::string error;      // set before the longjmp
  bool resource = false;  // the error is a limit, not bad data
  int32_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // width * height * channels
  std::vector<png_bytep> rows;
  int orientation = 1;
};

void on_error(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<Ctx*>(png_get_error_ptr(png));
  if (ctx->error.empty()) ctx->error = std::string("PNG data is corrupt: ") + msg;
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // ancillary-chunk trouble: PIL ignores it too

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* ctx = static_cast<Ctx*>(png_get_io_ptr(png));
  if (n > ctx->bytes.size() - ctx->pos) {
    ctx->error = "PNG data truncated at byte " + std::to_string(ctx->bytes.size());
    png_error(png, "truncated");
  }
  std::memcpy(out, ctx->bytes.data() + ctx->pos, n);
  ctx->pos += n;
}

// Sizes the buffers (a C++ call that returns before libpng runs again).
bool allocate(Ctx* ctx) {
  try {
    ctx->pixels.resize(size_t(ctx->width) * ctx->height * ctx->channels);
    ctx->rows.resize(ctx->height);
    for (int32_t y = 0; y < ctx->height; ++y)
      ctx->rows[y] = &ctx->pixels[size_t(y) * ctx->width * ctx->channels];
    return true;
  } catch (const std::bad_alloc&) {
    ctx->error = "out of memory for the decoded PNG";
    ctx->resource = true;
    return false;
  }
}

// Checks the header's size against the limits without throwing (we are inside setjmp).
bool size_ok(Ctx* ctx, png_uint_32 w, png_uint_32 h) {
  try {
    check_dimensions(w, h, *ctx->what, "PNG", *ctx->limits);
    return true;
  } catch (const Error& e) {
    ctx->error = e.what();
    ctx->resource = e.kind() == ErrorKind::kResource;
    return false;
  }
}

// Returns false with ctx->error set on any failure.
bool read_png(Ctx* ctx) {
  png_structp png = ctx->png;
  png_infop info = ctx->info;
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, ctx, on_read);
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  if (!size_ok(ctx, w, h)) return false;
#ifdef PNG_eXIf_SUPPORTED
  png_uint_32 n_exif = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(png, info, &n_exif, &exif) != 0)
    ctx->orientation = exif_orientation(exif, n_exif);
#endif
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  const bool alpha =
      (color & PNG_COLOR_MASK_ALPHA) != 0 || png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  if (png_get_valid(png, info, PNG_INFO_tRNS) != 0) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_strip_16(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  ctx->width = static_cast<int32_t>(w);
  ctx->height = static_cast<int32_t>(h);
  ctx->channels = alpha ? 4 : 3;
  if (png_get_bit_depth(png, info) != 8 || png_get_channels(png, info) != ctx->channels ||
      png_get_rowbytes(png, info) != size_t(ctx->width) * ctx->channels) {
    ctx->error = "PNG pixel layout not understood";
    return false;
  }
  if (!allocate(ctx)) return false;
  png_read_image(png, ctx->rows.data());
  return true;  // the chunks after the pixels (and IEND) are not needed
}

}  // namespace

Image decode_png(std::string_view bytes, const std::string& what, const DecodeLimits& limits) {
  Ctx ctx;
  ctx.bytes = bytes;
  ctx.what = &what;
  ctx.limits = &limits;
  ctx.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, on_error, on_warning);
  if (ctx.png != nullptr) ctx.info = png_create_info_struct(ctx.png);
  if (ctx.png == nullptr || ctx.info == nullptr) {
    png_destroy_read_struct(&ctx.png, &ctx.info, nullptr);
    fail(ErrorKind::kResource, "image", what + ": libpng could not start");
  }
  // No limit of libpng's own on width/height (ours is checked above); chunk memory capped.
  png_set_user_limits(ctx.png, 0x7fffffff, 0x7fffffff);
  const bool ok = read_png(&ctx);
  png_destroy_read_struct(&ctx.png, &ctx.info, nullptr);
  if (!ok) {
    if (ctx.error.rfind("[image]", 0) == 0) {  // from check_dimensions: already complete
      throw Error(ctx.resource ? ErrorKind::kResource : ErrorKind::kInvalidInput, ctx.error);
    }
    if (ctx.resource) fail(ErrorKind::kResource, "image", what + ": " + ctx.error);
    fail_invalid(what, ctx.error);
  }
  Image out;
  out.width = ctx.width;
  out.height = ctx.height;
  if (ctx.channels == 3) {
    out.rgb = std::move(ctx.pixels);
  } else {
    out.rgb.resize(size_t(out.width) * out.height * 3);
    rgba_over_white(ctx.pixels.data(), size_t(out.width) * out.height, out.rgb.data());
  }
  return apply_orientation(std::move(out), ctx.orientation);
}

}  // namespace hearth::vision::detail
