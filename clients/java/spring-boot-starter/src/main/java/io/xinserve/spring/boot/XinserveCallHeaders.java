package io.xinserve.spring.boot;

import java.util.Map;

/**
 * Beans of this type add headers to every call of every auto-configured client, asked at the start
 * of each call (the starter registers one that propagates the current trace as {@code
 * traceparent} when Micrometer Tracing is present).
 */
@FunctionalInterface
public interface XinserveCallHeaders {
  /**
   * @return headers for the call being started (lower-case names); empty for none
   */
  Map<String, String> headers();
}
