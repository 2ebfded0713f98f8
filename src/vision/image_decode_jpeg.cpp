// JPEG through libjpeg(-turbo), set up as Pillow does (default IDCT and fancy
// upsampling). libjpeg reports errors through error_exit, which longjmps back to
// read_jpeg, a function that holds no C++ objects of its own; the memory source fails
// the same way when the data ends early (libjpeg's own would pad with a fake EOI and
// hand back grey). Grey is expanded, CMYK (stored inverted, the Adobe convention PIL
// assumes) converted with Pillow's formula; the EXIF orientation is applied.
#include <csetjmp>
#include <cstddef>  // jpeglib.h needs size_t and FILE declared before it
#include <cstdio>
#include <cstring>
#include <vector>

// clang-format off
#include <jpeglib.h>
// clang-format on

#include "core/error.h"
#include "vision/image_decode_detail.h"

namespace hearth::vision::detail {
namespace {

struct Ctx {
  jpeg_error_mgr err{};
  jpeg_source_mgr src{};
  std::jmp_buf jump;
  std::string_view bytes;
  const std::string* what = nullptr;
  const DecodeLimits* limits = nullptr;
  std::string error;
  bool resource = false;
  bool complete_error = false;  // error is a whole "[image] ..." message
  int32_t width = 0, height = 0, components = 0;
  std::vector<uint8_t> pixels;  // width * height * components, as libjpeg writes them
  int orientation = 1;
};

Ctx* ctx_of(j_common_ptr cinfo) { return reinterpret_cast<Ctx*>(cinfo->client_data); }

void on_error_exit(j_common_ptr cinfo) {
  Ctx* ctx = ctx_of(cinfo);
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  if (ctx->error.empty()) ctx->error = std::string("JPEG data is corrupt: ") + message;
  std::longjmp(ctx->jump, 1);
}

void on_output_message(j_common_ptr) {}  // warnings (corrupt but decodable data): PIL ignores them

void on_init_source(j_decompress_ptr) {}
void on_term_source(j_decompress_ptr) {}

boolean on_fill_input_buffer(j_decompress_ptr cinfo) {
  Ctx* ctx = ctx_of(reinterpret_cast<j_common_ptr>(cinfo));
  ctx->error = "JPEG data truncated at byte " + std::to_string(ctx->bytes.size());
  std::longjmp(ctx->jump, 1);
}

void on_skip_input_data(j_decompress_ptr cinfo, long n) {
  if (n <= 0) return;
  jpeg_source_mgr* src = cinfo->src;
  while (static_cast<size_t>(n) > src->bytes_in_buffer)
    on_fill_input_buffer(cinfo);  // does not return
  src->next_input_byte += n;
  src->bytes_in_buffer -= static_cast<size_t>(n);
}

bool size_ok(Ctx* ctx, int64_t w, int64_t h) {
  try {
    check_dimensions(w, h, *ctx->what, "JPEG", *ctx->limits);
    return true;
  } catch (const Error& e) {
    ctx->error = e.what();
    ctx->resource = e.kind() == ErrorKind::kResource;
    ctx->complete_error = true;
    return false;
  }
}

bool allocate(Ctx* ctx) {
  try {
    ctx->pixels.resize(size_t(ctx->width) * ctx->height * ctx->components);
    return true;
  } catch (const std::bad_alloc&) {
    ctx->error = "out of memory for the decoded JPEG";
    ctx->resource = true;
    return false;
  }
}

void find_orientation(Ctx* ctx, jpeg_decompress_struct* cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 &&
        std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      ctx->orientation = exif_orientation(m->data + 6, m->data_length - 6);
      return;
    }
  }
}

bool read_jpeg(Ctx* ctx, jpeg_decompress_struct* cinfo) {
  if (setjmp(ctx->jump)) return false;
  jpeg_create_decompress(cinfo);
  cinfo->client_data = ctx;
  cinfo->src = &ctx->src;
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(cinfo, TRUE);
  if (!size_ok(ctx, cinfo->image_width, cinfo->image_height)) return false;
  find_orientation(ctx, cinfo);
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
      cinfo->out_color_space = JCS_GRAYSCALE;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      break;
    default:
      cinfo->out_color_space = JCS_RGB;
      break;
  }
  jpeg_start_decompress(cinfo);
  ctx->width = static_cast<int32_t>(cinfo->output_width);
  ctx->height = static_cast<int32_t>(cinfo->output_height);
  ctx->components = cinfo->output_components;
  if (!allocate(ctx)) return false;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = &ctx->pixels[size_t(cinfo->output_scanline) * ctx->width * ctx->components];
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  return true;  // the end of the file (EOI) is not needed
}

}  // namespace

Image decode_jpeg(std::string_view bytes, const std::string& what, const DecodeLimits& limits) {
  Ctx ctx;
  ctx.bytes = bytes;
  ctx.what = &what;
  ctx.limits = &limits;
  ctx.src.next_input_byte = reinterpret_cast<const JOCTET*>(bytes.data());
  ctx.src.bytes_in_buffer = bytes.size();
  ctx.src.init_source = on_init_source;
  ctx.src.fill_input_buffer = on_fill_input_buffer;
  ctx.src.skip_input_data = on_skip_input_data;
  ctx.src.resync_to_restart = jpeg_resync_to_restart;
  ctx.src.term_source = on_term_source;
  jpeg_decompress_struct cinfo{};
  cinfo.err = jpeg_std_error(&ctx.err);
  ctx.err.error_exit = on_error_exit;
  ctx.err.output_message = on_output_message;
  cinfo.client_data = &ctx;
  const bool ok = read_jpeg(&ctx, &cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (!ok) {
    if (ctx.complete_error)
      throw Error(ctx.resource ? ErrorKind::kResource : ErrorKind::kInvalidInput, ctx.error);
    if (ctx.resource) fail(ErrorKind::kResource, "image", what + ": " + ctx.error);
    fail_invalid(what, ctx.error);
  }
  Image out;
  out.width = ctx.width;
  out.height = ctx.height;
  const size_t n = size_t(ctx.width) * ctx.height;
  if (ctx.components == 3) {
    out.rgb = std::move(ctx.pixels);
  } else if (ctx.components == 1) {
    out.rgb.resize(n * 3);
    for (size_t i = 0; i < n; ++i)
      out.rgb[3 * i] = out.rgb[3 * i + 1] = out.rgb[3 * i + 2] = ctx.pixels[i];
  } else if (ctx.components == 4) {
    // Inverted CMYK to RGB as Pillow's cmyk2rgb: nk = 255 - k, channel = nk - c * nk / 255.
    out.rgb.resize(n * 3);
    for (size_t i = 0; i < n; ++i) {
      const int nk = ctx.pixels[4 * i + 3];  // 255 - k, the data being inverted
      for (int c = 0; c < 3; ++c) {
        const int cc = 255 - ctx.pixels[4 * i + c];
        const int t = cc * nk + 128;
        const int v = nk - (((t >> 8) + t) >> 8);
        out.rgb[3 * i + c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  } else {
    fail(ErrorKind::kUnsupported, "image",
         what + ": JPEG with " + std::to_string(ctx.components) + " components");
  }
  return apply_orientation(std::move(out), ctx.orientation);
}

}  // namespace hearth::vision::detail
