package io.xinserve.client;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Duration;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * Ready-made bearer token suppliers for {@link XinserveClient.Builder#bearerToken(Supplier)}.
 * Any {@code Supplier<String>} works: it is called for every call, so a supplier that returns a
 * fresh token after a refresh is all "refreshable" needs.
 */
public final class BearerTokens {
  private BearerTokens() {}

  /** How long {@link #fromFile(Path)} keeps the last token read while the file is unreadable. */
  public static final Duration DEFAULT_MAX_STALE = Duration.ofSeconds(60);

  /**
   * A token kept in a file (e.g. a mounted Kubernetes secret), re-read whenever the file's
   * modification time changes; {@link #fromFile(Path, Duration)} with {@link #DEFAULT_MAX_STALE}
   * (60 s).
   *
   * @param file the file holding the token
   * @return the supplier
   */
  public static Supplier<String> fromFile(Path file) {
    return fromFile(file, DEFAULT_MAX_STALE);
  }

  /**
   * A token kept in a file (e.g. a mounted Kubernetes secret), re-read whenever the file's
   * modification time changes. Surrounding whitespace is stripped. While the file cannot be read
   * (Kubernetes swaps a secret volume's files by replacing a symbolic link, so for a moment the
   * file may be missing), the last token read is returned for at most {@code maxStale} after the
   * last successful read; after that, or if no token was ever read, the call fails.
   *
   * @param file the file holding the token
   * @param maxStale how long the last token read is kept while the file is unreadable; {@link
   *     Duration#ZERO} keeps none
   * @return a supplier that throws {@link UncheckedIOException} if the file cannot be read and no
   *     token read within {@code maxStale} is kept
   * @throws IllegalArgumentException if {@code maxStale} is negative
   */
  public static Supplier<String> fromFile(Path file, Duration maxStale) {
    Objects.requireNonNull(file, "file");
    Objects.requireNonNull(maxStale, "maxStale");
    if (maxStale.isNegative()) {
      throw new IllegalArgumentException("maxStale must not be negative: " + maxStale);
    }
    long maxStaleNanos = maxStale.toNanos();
    return new Supplier<>() {
      private FileTime seen;
      private String token;
      private long readAt;

      @Override
      public synchronized String get() {
        try {
          FileTime mtime = Files.getLastModifiedTime(file);
          if (token == null || !mtime.equals(seen)) {
            token = Files.readString(file, StandardCharsets.UTF_8).strip();
            seen = mtime;
          }
          readAt = System.nanoTime();
          return token;
        } catch (IOException e) {
          if (token != null && System.nanoTime() - readAt < maxStaleNanos) {
            return token;
          }
          throw new UncheckedIOException("cannot read bearer token file " + file, e);
        }
      }
    };
  }
}
