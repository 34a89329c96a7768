package io.xinserve.spring.ai;

import io.micrometer.observation.ObservationRegistry;
import io.xinserve.spring.boot.XinserveClients;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.observation.ChatModelObservationConvention;
import org.springframework.ai.model.SpringAIModelProperties;
import org.springframework.ai.embedding.EmbeddingModel;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;

/**
 * Auto-configures a Spring AI {@link XinserveChatModel} and {@link XinserveEmbeddingModel} when
 * Spring AI is on the class path, over the xinserve client named by {@code xinserve.ai.client}
 * (default: the default client of {@code xinserve.client.*}). Each backs off when the application
 * defines its own bean of that type, or with {@code xinserve.ai.chat.enabled=false} / {@code
 * xinserve.ai.embedding.enabled=false}.
 *
 * <p>As with Spring AI's own model starters, the chat model is selected by {@code
 * spring.ai.model.chat}: it is defined when the property is {@value #MODEL_NAME} or unset, and
 * not for any other value (so {@code spring.ai.model.chat=xinserve} picks xinserve when Spring
 * AI's OpenAI starter is on the class path too, and {@code spring.ai.model.chat=openai} picks
 * OpenAI). Spring AI's {@code ChatClientAutoConfiguration} (a dependency of this module, as of
 * Spring AI's starters) then builds the {@code ChatClient.Builder} from that single {@code
 * ChatModel}, and {@code ChatObservationAutoConfiguration} meters the model's observations.
 *
 * <p>The same sources are built for Spring Boot 3.5 / Spring AI 1.1 ({@code xinserve-spring-ai},
 * on {@code xinserve-spring-boot-starter}) and Spring Boot 4.0 / Spring AI 2.0 ({@code
 * xinserve-spring-ai-boot4}, on {@code xinserve-spring-boot4-starter}); on the other Boot
 * generation the context fails to start, naming the artifact to use.
 */
@AutoConfiguration(afterName = "io.xinserve.spring.boot.XinserveClientAutoConfiguration")
@ConditionalOnClass({ChatModel.class, XinserveClients.class})
@ConditionalOnBean(XinserveClients.class)
@EnableConfigurationProperties(XinserveAiProperties.class)
public class XinserveAiAutoConfiguration {
  /** The value of {@code spring.ai.model.chat} that selects xinserve's chat model. */
  public static final String MODEL_NAME = "xinserve";

  /** Fails at start-up on a Spring Boot generation other than the one this jar was built for. */
  public XinserveAiAutoConfiguration() {
    java.util.Properties built = BuiltFor.properties();
    BuiltFor.require(
        SpringBootVersion.getVersion(), built.getProperty("spring-boot.version"), built.getProperty("artifact"));
  }

  /**
   * @param clients the configured clients
   * @param properties {@code xinserve.ai.*}
   * @param toolCallingManager the application's {@link ToolCallingManager} (Spring AI's tool
   *     auto-configuration defines one that resolves tool names to beans); Spring AI's default
   *     when there is none
   * @param observationRegistry the context's {@link ObservationRegistry} (Spring Boot's
   *     actuator defines one); {@link ObservationRegistry#NOOP} when there is none
   * @param observationConvention the application's {@link ChatModelObservationConvention}, if
   *     one
   * @return the chat model
   * @throws java.util.NoSuchElementException if {@code xinserve.ai.client} names no client
   */
  @Bean
  @ConditionalOnMissingBean(XinserveChatModel.class)
  @ConditionalOnProperty(prefix = "xinserve.ai.chat", name = "enabled", matchIfMissing = true)
  @ConditionalOnProperty(
      name = SpringAIModelProperties.CHAT_MODEL,
      havingValue = MODEL_NAME,
      matchIfMissing = true)
  public XinserveChatModel xinserveChatModel(
      XinserveClients clients,
      XinserveAiProperties properties,
      ObjectProvider<ToolCallingManager> toolCallingManager,
      ObjectProvider<ObservationRegistry> observationRegistry,
      ObjectProvider<ChatModelObservationConvention> observationConvention) {
    XinserveChatModel model =
        new XinserveChatModel(
            clients.get(properties.getClient()),
            properties.getChat().getOptions(),
            toolCallingManager.getIfUnique(),
            observationRegistry.getIfUnique(() -> ObservationRegistry.NOOP));
    observationConvention.ifAvailable(model::setObservationConvention);
    return model;
  }

  /**
   * @param clients the configured clients
   * @param properties {@code xinserve.ai.*}
   * @return the embedding model
   */
  @Bean
  @ConditionalOnMissingBean(XinserveEmbeddingModel.class)
  @ConditionalOnClass(EmbeddingModel.class)
  @ConditionalOnProperty(prefix = "xinserve.ai.embedding", name = "enabled", matchIfMissing = true)
  public XinserveEmbeddingModel xinserveEmbeddingModel(
      XinserveClients clients, XinserveAiProperties properties) {
    return new XinserveEmbeddingModel(
        clients.get(properties.getClient()), properties.getEmbedding().getModel());
  }
}
