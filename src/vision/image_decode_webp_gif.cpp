// WebP through libwebp's animation decoder (as Pillow does, for still images too: the
// first frame as it shows on the canvas), and GIF's first frame through giflib's
// record-level API (only that frame is read, never the whole animation). Alpha and GIF
// transparency go over white; the orientation of a WebP EXIF chunk is applied.
#include <gif_lib.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "vision/image_decode_detail.h"

namespace hearth::vision::detail {

Image decode_webp(std::string_view bytes, const std::string& what, const DecodeLimits& limits) {
  WebPBitstreamFeatures features;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const VP8StatusCode status = WebPGetFeatures(data, bytes.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) {
    fail_invalid(what, "WebP data truncated at byte " + std::to_string(bytes.size()));
  }
  if (status != VP8_STATUS_OK)
    fail_invalid(what,
                 "WebP header is corrupt (libwebp status " + std::to_string(int(status)) + ")");
  check_dimensions(features.width, features.height, what, "WebP", limits);

  WebPData webp_data{data, bytes.size()};
  WebPAnimDecoderOptions options;
  WebPAnimDecoderOptionsInit(&options);
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> dec(
      WebPAnimDecoderNew(&webp_data, &options), WebPAnimDecoderDelete);
  if (!dec) {
    // The demuxer takes the whole file: a container that ends early is refused here.
    fail_invalid(what,
                 "WebP data is corrupt or truncated (" + std::to_string(bytes.size()) + " bytes)");
  }
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec.get(), &info)) fail_invalid(what, "WebP container is corrupt");
  check_dimensions(info.canvas_width, info.canvas_height, what, "WebP", limits);
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderHasMoreFrames(dec.get()) ||
      !WebPAnimDecoderGetNext(dec.get(), &rgba, &timestamp)) {
    fail_invalid(what, "WebP image data is corrupt or truncated (" + std::to_string(bytes.size()) +
                           " bytes)");
  }
  Image out;
  out.width = static_cast<int32_t>(info.canvas_width);
  out.height = static_cast<int32_t>(info.canvas_height);
  out.rgb.resize(size_t(out.width) * out.height * 3);
  rgba_over_white(rgba, size_t(out.width) * out.height, out.rgb.data());

  int orientation = 1;
  const WebPDemuxer* demux = WebPAnimDecoderGetDemuxer(dec.get());
  WebPChunkIterator chunk;
  if (WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {
    const uint8_t* exif = chunk.chunk.bytes;
    size_t n = chunk.chunk.size;
    if (n >= 6 && std::memcmp(exif, "Exif\0\0", 6) == 0)
      exif += 6, n -= 6;  // some writers keep the JPEG prefix
    orientation = exif_orientation(exif, n);
    WebPDemuxReleaseChunkIterator(&chunk);
  }
  return apply_orientation(std::move(out), orientation);
}

namespace {

struct GifSource {
  std::string_view bytes;
  size_t pos = 0;
  bool short_read = false;
};

int gif_read(GifFileType* gif, GifByteType* out, int n) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  size_t take = n < 0 ? 0 : static_cast<size_t>(n);
  if (take > src->bytes.size() - src->pos) {
    take = src->bytes.size() - src->pos;
    src->short_read = true;
  }
  std::memcpy(out, src->bytes.data() + src->pos, take);
  src->pos += take;
  return static_cast<int>(take);
}

[[noreturn]] void gif_fail(const std::string& what, const GifSource& src, int code) {
  if (src.short_read)
    fail_invalid(what, "GIF data truncated at byte " + std::to_string(src.bytes.size()));
  const char* reason = GifErrorString(code);
  fail_invalid(what,
               std::string("GIF data is corrupt: ") + (reason ? reason : "unknown giflib error"));
}

}  // namespace

Image decode_gif(std::string_view bytes, const std::string& what, const DecodeLimits& limits) {
  GifSource src{bytes};
  int code = 0;
  auto close = [](GifFileType* g) { DGifCloseFile(g, nullptr); };
  std::unique_ptr<GifFileType, decltype(close)> gif(DGifOpen(&src, gif_read, &code), close);
  if (!gif) gif_fail(what, src, code);
  const int64_t sw = gif->SWidth, sh = gif->SHeight;
  check_dimensions(sw, sh, what, "GIF", limits);

  int transparent = -1;  // from the graphics control block before the first frame
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif.get(), &type) == GIF_ERROR) gif_fail(what, src, gif->Error);
    if (type == TERMINATE_RECORD_TYPE) fail_invalid(what, "GIF has no image");
    if (type == EXTENSION_RECORD_TYPE) {
      int ext_code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif.get(), &ext_code, &ext) == GIF_ERROR)
        gif_fail(what, src, gif->Error);
      if (ext_code == GRAPHICS_EXT_FUNC_CODE && ext != nullptr) {
        GraphicsControlBlock gcb;
        if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) transparent = gcb.TransparentColor;
      }
      while (ext != nullptr) {
        if (DGifGetExtensionNext(gif.get(), &ext) == GIF_ERROR) gif_fail(what, src, gif->Error);
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif.get()) == GIF_ERROR) gif_fail(what, src, gif->Error);
    const GifImageDesc& d = gif->Image;
    const ColorMapObject* map = d.ColorMap != nullptr ? d.ColorMap : gif->SColorMap;
    if (map == nullptr) fail_invalid(what, "GIF frame has no colour table");
    if (d.Width <= 0 || d.Height <= 0) fail_invalid(what, "GIF frame has no pixels");
    check_dimensions(d.Width, d.Height, what, "GIF", limits);
    std::vector<GifPixelType> indices(size_t(d.Width) * d.Height);
    // Interlaced frames store rows in four passes: every 8th from 0, from 4, every 4th
    // from 2, every 2nd from 1.
    static const int kStart[4] = {0, 4, 2, 1}, kStep[4] = {8, 8, 4, 2};
    const int passes = d.Interlace ? 4 : 1;
    for (int p = 0; p < passes; ++p) {
      const int start = d.Interlace ? kStart[p] : 0, step = d.Interlace ? kStep[p] : 1;
      for (int y = start; y < d.Height; y += step) {
        if (DGifGetLine(gif.get(), &indices[size_t(y) * d.Width], d.Width) == GIF_ERROR) {
          gif_fail(what, src, gif->Error);
        }
      }
    }
    // The screen, white where the frame does not cover it or is transparent.
    Image out;
    out.width = static_cast<int32_t>(sw);
    out.height = static_cast<int32_t>(sh);
    out.rgb.assign(size_t(sw) * sh * 3, 255);
    for (int y = 0; y < d.Height; ++y) {
      const int64_t oy = int64_t{d.Top} + y;
      if (oy < 0 || oy >= sh) continue;
      for (int x = 0; x < d.Width; ++x) {
        const int64_t ox = int64_t{d.Left} + x;
        if (ox < 0 || ox >= sw) continue;
        const int index = indices[size_t(y) * d.Width + x];
        if (index == transparent) continue;
        uint8_t* px = &out.rgb[size_t(oy * sw + ox) * 3];
        if (index < map->ColorCount) {
          px[0] = map->Colors[index].Red;
          px[1] = map->Colors[index].Green;
          px[2] = map->Colors[index].Blue;
        } else {
          px[0] = px[1] = px[2] = 0;  // outside the table: black, as PIL's zero-padded palette
        }
      }
    }
    return out;
  }
}

}  // namespace hearth::vision::detail
