package io.xinserve.client;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * Ready-made bearer token suppliers for {@link XinserveClient.Builder#bearerToken(Supplier)}.
 * Any {@code Supplier<String>} works: it is called for every call, so a supplier that returns a
 * fresh token after a refresh is all "refreshable" needs.
 */
public final class BearerTokens {
  private BearerTokens() {}

  /**
   * A token kept in a file (e.g. a mounted Kubernetes secret), re-read whenever the file's
   * modification time changes. Surrounding whitespace is stripped.
   *
   * @param file the file holding the token
   * @return a supplier that throws {@link UncheckedIOException} if the file cannot be read
   */
  public static Supplier<String> fromFile(Path file) {
    Objects.requireNonNull(file, "file");
    return new Supplier<>() {
      private FileTime seen;
      private String token;

      @Override
      public synchronized String get() {
        try {
          FileTime mtime = Files.getLastModifiedTime(file);
          if (token == null || !mtime.equals(seen)) {
            token = Files.readString(file, StandardCharsets.UTF_8).strip();
            seen = mtime;
          }
          return token;
        } catch (IOException e) {
          throw new UncheckedIOException("cannot read bearer token file " + file, e);
        }
      }
    };
  }
}
