package io.xinserve.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Closed-loop load generator for a streaming OpenAI {@code POST /v1/completions} (server-sent
 * events), with {@code java.net.http.HttpClient} (HTTP/1.1, one client, one thread per stream),
 * driven over stdin by benchmarks/serving_throughput.py (its {@code javahttp} client rows).
 *
 * <p>Usage: {@code java -cp java-client-bench.jar io.xinserve.bench.HttpStreamGen URL BODIES_FILE
 * MAX_TOKENS}. BODIES_FILE holds one JSON request body per line (request {@code i} is line {@code
 * i % count}); each must ask for {@code stream} with {@code stream_options.include_usage}. A
 * call's token count is the last {@code completion_tokens} of its events (the usage event); its
 * TTFT is the time to the first event with non-empty {@code text}. A non-200 status or a count
 * other than MAX_TOKENS is an error.
 *
 * <p>Protocol as {@link LoadGen}: {@code READY}, then per stdin line {@code N TOTAL} one JSON line.
 */
public final class HttpStreamGen {
  private static final Pattern USAGE = Pattern.compile("\"completion_tokens\"\\s*:\\s*(\\d+)");
  private static final Pattern TEXT = Pattern.compile("\"text\"\\s*:\\s*\"[^\"]");

  private HttpStreamGen() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: HttpStreamGen URL BODIES_FILE MAX_TOKENS");
      System.exit(2);
    }
    URI url = URI.create(args[0]);
    List<String> bodies = new ArrayList<>();
    for (String line : Files.readAllLines(Path.of(args[1]), StandardCharsets.UTF_8)) {
      if (!line.isBlank()) {
        bodies.add(line);
      }
    }
    int maxTokens = Integer.parseInt(args[2]);
    HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
        .connectTimeout(Duration.ofSeconds(30)).build();
    try (BufferedReader stdin = new BufferedReader(
        new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
      System.out.println("READY");
      System.out.flush();
      String line;
      while ((line = stdin.readLine()) != null) {
        String[] f = line.trim().split("\\s+");
        if (f.length != 2) {
          continue;
        }
        System.out.println(RawStreamGen.run(Integer.parseInt(f[0]), Integer.parseInt(f[1]),
            i -> events(http, url, bodies.get(i % bodies.size())), maxTokens));
        System.out.flush();
      }
    }
  }

  /** The call's events as token counts: the usage event's count once, 1 for the first text event. */
  private static Iterator<Integer> events(HttpClient http, URI url, String body) {
    HttpRequest req = HttpRequest.newBuilder(url).timeout(Duration.ofSeconds(600))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build();
    HttpResponse<Stream<String>> resp;
    try {
      resp = http.send(req, HttpResponse.BodyHandlers.ofLines());
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
    if (resp.statusCode() != 200) {
      String text = String.join("\n", resp.body().limit(5).toList());
      throw new IllegalStateException("HTTP " + resp.statusCode() + ": " + text);
    }
    // Counts reported to RawStreamGen.run: 1 at the first text event (its TTFT), then at the
    // usage event the rest of completion_tokens, so the sum is completion_tokens.
    Iterator<String> lines = resp.body().iterator();
    return new Iterator<Integer>() {
      private boolean sawText;
      private int reported;
      private Integer pending;

      @Override
      public boolean hasNext() {
        while (pending == null && lines.hasNext()) {
          String l = lines.next();
          if (!l.startsWith("data: ") || l.startsWith("data: [DONE]")) {
            continue;
          }
          int n = 0;
          if (!sawText && TEXT.matcher(l).find()) {
            sawText = true;
            n = 1;
          }
          Matcher u = USAGE.matcher(l);
          Integer usage = null;
          while (u.find()) {
            usage = Integer.parseInt(u.group(1));
          }
          if (usage != null) {
            n = usage - reported;
          }
          reported += n;
          if (n != 0) {
            pending = n;
          }
        }
        return pending != null;
      }

      @Override
      public Integer next() {
        Integer n = pending;
        pending = null;
        return n;
      }
    };
  }
}
